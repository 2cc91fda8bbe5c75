"""lanebot's database: the single source of truth (DESIGN.md, "Durability and recovery").

- `models`: the tables (SQLModel), with timezone-aware UTC timestamps on every dialect;
- `db`: engines (`make_engine`), sessions, and Alembic migrations run from code (`migrate`);
- `deliveries`: webhook deliveries, stored in the request path and processed in order;
- `runs`: runs, plans, lanes, agent sessions and each run's append-only event history, changed
  by compare-and-set so that concurrent workers never both win;
- `reviews`: review requests on a run's pull request (fix lanes, lanebot's own review), at most
  one running per pull request, claimed by compare-and-set.
"""
