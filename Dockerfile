# syntax=docker/dockerfile:1
# Build wheels in one stage, run slim and non-root in the other.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY requirements.txt .
RUN pip wheel --no-cache-dir --wheel-dir /wheels -r requirements.txt

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PORT=8000
# curl: the HEALTHCHECK below; libpq5: PostgreSQL client library for psycopg;
# bubblewrap: the sandbox of tools.workbench run_python (with python3, the interpreter it
# runs; the worker container then needs `--security-opt seccomp=unconfined
# --security-opt apparmor=unconfined --security-opt systempaths=unconfined`, see README);
# chromium: the browser of tools.workbench browse (driven by Playwright, no download)
RUN apt-get update \
 && apt-get install -y --no-install-recommends curl libpq5 bubblewrap python3 chromium \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 1000 agentweb \
 && install -d -o agentweb -g agentweb /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/* && rm -rf /wheels
WORKDIR /app
COPY --chown=agentweb:agentweb . .
# Static files are collected at build time; the settings need placeholders to import.
RUN DEBUG=0 SECRET_KEY=build-only-placeholder-key-build-only-placeholder-key-xx \
    ALLOWED_HOSTS=build DATABASE_URL=postgresql://build@localhost/build \
    REDIS_URL=redis://localhost:6379/0 python manage.py collectstatic --noinput -v0
USER agentweb
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD curl -fsS --max-redirs 0 -L -o /dev/null "http://127.0.0.1:${PORT}/healthz" || exit 1
CMD ["sh", "-c", "daphne -b 0.0.0.0 -p ${PORT} agentweb.asgi:application"]
