// lanebot's dashboard, live: the page's <main data-events="..."> names its stream of server-sent
// events; on each `change` the page is fetched again and every part marked data-live="..." is
// replaced by the same part of the fresh page. Without JavaScript the page shows the state at load.
//
// Durations still growing (<span class="ticking" data-seconds="..." data-since="...">, the seconds
// at the server's render and the ISO instant they count from) are advanced each second, written as
// the server writes them (bot.core.text.format_duration, then "so far"). They count on from the
// server's seconds with this page's own monotonic clock, so a browser whose clock is wrong still
// shows the server's figure; data-since is used only when data-seconds is missing.
(function () {
  "use strict";
  var firstSeen = typeof WeakMap === "function" ? new WeakMap() : null;

  function durationText(seconds) {
    var whole = Math.round(seconds);
    if (whole < 60) {
      return whole + " s";
    }
    var minutes = Math.floor(whole / 60);
    var secs = whole % 60;
    if (minutes < 60) {
      return minutes + " min" + (secs ? " " + secs + " s" : "");
    }
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    return hours + " h" + (minutes ? " " + minutes + " min" : "");
  }

  function secondsOf(element, now) {
    var rendered = Number(element.getAttribute("data-seconds"));
    if (element.getAttribute("data-seconds") !== null && isFinite(rendered) && rendered >= 0) {
      if (!firstSeen.has(element)) {
        firstSeen.set(element, now);
      }
      return rendered + (now - firstSeen.get(element)) / 1000;
    }
    var since = Date.parse(element.getAttribute("data-since") || "");
    return isFinite(since) ? Math.max(0, (Date.now() - since) / 1000) : null;
  }

  function tick() {
    var now = window.performance.now();
    document.querySelectorAll(".ticking").forEach(function (element) {
      var seconds = secondsOf(element, now);
      if (seconds !== null) {
        var text = durationText(seconds) + " so far";
        if (element.textContent !== text) {
          element.textContent = text;
        }
      }
    });
  }

  if (firstSeen && window.performance && document.querySelectorAll) {
    tick();
    window.setInterval(tick, 1000);
  }

  var main = document.querySelector("main[data-events]");
  if (!main || !window.EventSource || !window.fetch || !window.DOMParser) {
    return;
  }
  var busy = false;
  var again = false;
  var source = null;

  function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", redirect: "manual", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("the page answered " + response.status);
        }
        return response.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (part) {
          var name = part.getAttribute("data-live");
          var replacement = fresh.querySelector('[data-live="' + name + '"]');
          if (replacement) {
            part.replaceWith(document.importNode(replacement, true));
          }
        });
        document.documentElement.setAttribute("data-live-updated", String(Date.now()));
      })
      .catch(function () {
        // Signed out, or the server went away: stop; a reload shows why.
        if (source) {
          source.close();
        }
      })
      .then(function () {
        busy = false;
        if (again) {
          again = false;
          refresh();
        }
      });
  }

  source = new EventSource(main.getAttribute("data-events"));
  source.addEventListener("change", refresh);
  source.addEventListener("gone", function () {
    source.close();
  });
  document.documentElement.setAttribute("data-live-state", "on");
})();
