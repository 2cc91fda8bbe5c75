// lanebot's dashboard, live: the page's <main data-events="..."> names its stream of server-sent
// events; on each `change` the page is fetched again and every part marked data-live="..." is
// replaced by the same part of the fresh page. Without JavaScript the page shows the state at load.
(function () {
  "use strict";
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
