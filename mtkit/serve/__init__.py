"""`mtkit serve`: a loaded model over HTTP. `app` (the FastAPI application: endpoints, limits,
authentication, request log), `batcher` (sentences of concurrent requests decoded together),
`schema` (the JSON in and out), `metrics` (Prometheus), `page/` (the page at /: HTML, CSS
and JavaScript, no build step). Needs the `serve` extra: ``pip install 'mtkit[serve]'``."""
