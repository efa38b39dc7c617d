"""agentweb settings: everything configurable comes from the environment (see README)."""

from __future__ import annotations

import ipaddress
import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from agentweb.env import (
    database_from_url,
    database_pool,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
    issuer_url,
    model_spec,
    parse_prices,
    parse_roles_map,
    redis_urls,
)
from agentweb.notify.config import check_site_url_for_links, parse_slack_users, parse_webhooks
from agentweb.observability.logs import logging_config
from agentweb.outbox.config import check_http_url, parse_mail_from, parse_site_url, parse_smtp_url
from agentweb.tickets.config import parse_imap_url, parse_intake_rules

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "dev-only-insecure-key-" + "x" * 40
if not DEBUG and len(SECRET_KEY) < 50:
    raise ImproperlyConfigured("SECRET_KEY must be at least 50 characters when DEBUG is off")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
if not DEBUG and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must be set when DEBUG is off")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("http://", "https://")):
        raise ImproperlyConfigured(
            f"CSRF_TRUSTED_ORIGINS entries must start with http:// or https://, got {_origin!r}"
        )

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "channels",
    "django_htmx",
    "axes",
    "csp",
    "agentweb.accounts",
    "agentweb.teams",
    "agentweb.budgets",
    "agentweb.shop",
    "agentweb.tickets",
    "agentweb.runs",
    "agentweb.mcpservers",
    "agentweb.outbox",
    "agentweb.notify",
    "agentweb.web",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "agentweb.middleware.EdgeMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "agentweb.middleware.RoleRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "csp.middleware.CSPMiddleware",
    "axes.middleware.AxesMiddleware",
    # Last, so it sees views' exceptions first: error pages in the app's layout.
    "agentweb.web.errors.ErrorPagesMiddleware",
]

ROOT_URLCONF = "agentweb.urls"
ASGI_APPLICATION = "agentweb.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "agentweb.web.context.navigation",
            ],
        },
    },
]

# --- Database: PostgreSQL only (the embedded default is started by agentweb.devstack).
_database_url = env_str("DATABASE_URL")
if not _database_url:
    raise ImproperlyConfigured(
        "DATABASE_URL is not set: point it at PostgreSQL, or start through `make run` / "
        "`make test`, which start an embedded PostgreSQL when it is unset"
    )
DATABASES = {"default": database_from_url(_database_url)}
# No connection kept per thread by default: under ASGI every request may run in another
# thread, and a connection kept per thread is never reused nor closed (Django's docs say
# to disable them under ASGI); 24 polling clients ran PostgreSQL out of connections.
# Instead each process has a pool of at most DB_POOL_SIZE connections: a request, task
# step or tool call borrows one and gives it back when done (opening a connection cost a
# tool call more than its queries). DB_POOL_SIZE=0: each opens its own and closes it.
_conn_max_age = env_int("DB_CONN_MAX_AGE", 0, minimum=0)
DATABASES["default"]["CONN_MAX_AGE"] = _conn_max_age
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
_pool = database_pool(env_int("DB_POOL_SIZE", 10, minimum=0), _conn_max_age)
if _pool is not None:
    _options = DATABASES["default"]["OPTIONS"]
    assert isinstance(_options, dict)
    _options["pool"] = _pool
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: Celery broker and the channel layer.
REDIS_URL = env_str("REDIS_URL")
if not REDIS_URL:
    raise ImproperlyConfigured(
        "REDIS_URL is not set: point it at Redis, or start through `make run` / `make test`, "
        "which start an embedded Redis when it is unset"
    )
CELERY_BROKER_URL, _channels_redis = redis_urls(REDIS_URL)
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "agentweb.channel_layer.RedisLayer",
        "CONFIG": {
            # redis-py 8 gives each connection a 5 s read timeout, the same as channels-redis'
            # blocking pop (idle consumers then die with "Timeout reading from redis"), and
            # caps an asyncio pool at 100 connections (200 sockets subscribing at once were
            # refused). A longer read timeout and a larger pool fix both. The connections
            # are ours so that a cancelled receive ends (agentweb/channel_layer.py).
            "hosts": [{"address": _channels_redis, "socket_timeout": 30, "max_connections": 2000}],
            "capacity": 1500,
            "expiry": 30,
        },
    }
}
# Separate installations (or test stacks) sharing one Redis use separate queues.
CELERY_TASK_DEFAULT_QUEUE = env_str("AGENTWEB_QUEUE", "celery")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# No acknowledgement emulation: kombu would otherwise keep each delivered message in a
# Redis hash until its task ends (a MULTI/EXEC round trip before the task is handed to a
# thread, another after it), to put it back an hour later if the worker died. A message
# only wakes a worker; a run whose worker died is sent again by beat's sweep (its lease,
# or a queued run with an empty queue: lifecycle.due_now_if_messages_lost). Messages a
# worker holds when it shuts down are still put back (kombu's in-memory QoS).
CELERY_BROKER_TRANSPORT_OPTIONS = {"ack_emulation": False}
# A run's task goes on when the broker's connection drops: the run is a PostgreSQL row
# under a lease, its steps are stored, and a message Redis lost is sent again by beat's
# sweep. Cancelling it (Celery 6.0's coming default) would only throw its work away. Said
# here, Celery's warning about that default is noise (agentweb/celery.py silences it).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False

# --- Agent configuration.
AGENTWEB_MODEL = model_spec(env_str("AGENTWEB_MODEL", "demo"))
AGENTWEB_STREAM = env_bool("AGENTWEB_STREAM", True)
# A model reply's text beyond this many characters is cut (and marked truncated).
AGENTWEB_MAX_REPLY_CHARS = env_int("AGENTWEB_MAX_REPLY_CHARS", 100_000, minimum=100)
AGENTWEB_TOOLS = env_list("AGENTWEB_TOOLS", ["tools.ticket"])
if not AGENTWEB_TOOLS:
    raise ImproperlyConfigured("AGENTWEB_TOOLS must name at least one module")
AGENTWEB_PRICES = parse_prices(env_str("AGENTWEB_PRICES"))
AGENTWEB_LEASE_SECONDS = env_int("AGENTWEB_LEASE_SECONDS", 30, minimum=2)
# A step in the middle of a run is committed without waiting for PostgreSQL's disk flush
# (synchronous_commit off: lost only if PostgreSQL itself crashes, then redone from the
# last flushed step); a run's end or pause, and anything else, waits. 1: every step waits.
AGENTWEB_SYNC_STEPS = env_bool("AGENTWEB_SYNC_STEPS", False)
# Decimals accepted (0.01 hours is 36 s), so drills and tests need not wait.
AGENTWEB_APPROVAL_TTL_HOURS = env_float("AGENTWEB_APPROVAL_TTL_HOURS", 24, above=0)
# tools.workbench (optional): run workspaces, their retention, the address guard's
# exceptions. The tools read the same variables per call; they are checked here so a bad
# value stops start-up.
AGENTWEB_DATA_DIR = Path(env_str("AGENTWEB_DATA_DIR") or BASE_DIR / "var" / "data")
if not AGENTWEB_DATA_DIR.is_absolute():
    AGENTWEB_DATA_DIR = BASE_DIR / AGENTWEB_DATA_DIR
AGENTWEB_WORKSPACE_RETENTION_DAYS = env_int("AGENTWEB_WORKSPACE_RETENTION_DAYS", 30, minimum=0)
AGENTWEB_HTTP_ALLOW = env_list("AGENTWEB_HTTP_ALLOW", [])
for _item in AGENTWEB_HTTP_ALLOW:
    try:
        ipaddress.ip_network(_item, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"AGENTWEB_HTTP_ALLOW: {_item!r} is not an IP address or CIDR network"
        ) from None
# MCP servers (agentweb.mcpservers): seconds a call may take before it fails (the server
# is then started again, or connected again, for the next call).
AGENTWEB_MCP_TIMEOUT_SECONDS = env_int("AGENTWEB_MCP_TIMEOUT_SECONDS", 60, minimum=1)
# A model call's overall deadline (retries included), besides the provider's read timeout.
AGENTWEB_MODEL_DEADLINE_SECONDS = env_int("AGENTWEB_MODEL_DEADLINE_SECONDS", 120, minimum=1)
# approval_policies {"<high-risk tool>": "never"} are refused unless this is set.
AGENTWEB_ALLOW_UNAPPROVED_HIGH_RISK = env_bool("AGENTWEB_ALLOW_UNAPPROVED_HIGH_RISK", False)
# Test-only fault injection: the worker process exits (os._exit) at this named point of a
# step (see agentweb/runs/faults.py). Unset in every real installation.
AGENTWEB_TEST_CRASH_AT = env_str("AGENTWEB_TEST_CRASH_AT")
for _name in ("OPENAI", "ANTHROPIC"):
    _base = env_str(f"{_name}_BASE_URL")
    if _base and not _base.startswith(("http://", "https://")):
        raise ImproperlyConfigured(f"{_name}_BASE_URL must start with http:// or https://")

# --- Outgoing messages (agentweb/outbox): mail, signed webhooks, Slack.
AGENTWEB_SMTP = parse_smtp_url(env_str("AGENTWEB_SMTP_URL"))
AGENTWEB_MAIL_FROM = parse_mail_from(env_str("AGENTWEB_MAIL_FROM"), AGENTWEB_SMTP)
# Links in mails and Slack messages start with it (make run sets its own address).
AGENTWEB_SITE_URL = parse_site_url(env_str("AGENTWEB_SITE_URL"))
# One network operation of a delivery (connect, a reply) waits at most this long.
AGENTWEB_DELIVERY_TIMEOUT_SECONDS = env_float("AGENTWEB_DELIVERY_TIMEOUT_SECONDS", 10, above=0)
# A delivery that keeps failing is retried with backoff for this long, then failed.
AGENTWEB_DELIVERY_RETRY_HOURS = env_float("AGENTWEB_DELIVERY_RETRY_HOURS", 24, above=0)

# --- Approvals where people work (agentweb/notify, DESIGN §12).
AGENTWEB_SLACK_WEBHOOK_URL = env_str("AGENTWEB_SLACK_WEBHOOK_URL")
if AGENTWEB_SLACK_WEBHOOK_URL:
    check_http_url(AGENTWEB_SLACK_WEBHOOK_URL, "AGENTWEB_SLACK_WEBHOOK_URL")
AGENTWEB_SLACK_SIGNING_SECRET = env_str("AGENTWEB_SLACK_SIGNING_SECRET")
if AGENTWEB_SLACK_WEBHOOK_URL and not AGENTWEB_SLACK_SIGNING_SECRET:
    raise ImproperlyConfigured(
        "AGENTWEB_SLACK_SIGNING_SECRET must be set when AGENTWEB_SLACK_WEBHOOK_URL is: the "
        "messages' buttons call back to /hooks/slack/interactions, signed with it (your Slack "
        "app's Basic Information page)"
    )
AGENTWEB_SLACK_USERS = parse_slack_users(env_str("AGENTWEB_SLACK_USERS"))
AGENTWEB_WEBHOOKS = parse_webhooks(env_str("AGENTWEB_WEBHOOKS"))
check_site_url_for_links(AGENTWEB_SITE_URL, AGENTWEB_SMTP is not None, AGENTWEB_SLACK_WEBHOOK_URL)
# Escalation: a request still pending this long goes to the group's members too (0: off;
# a policy's escalate_after_minutes sets it per tool). One reminder goes this long before
# expiry to everyone first told.
AGENTWEB_ESCALATE_AFTER_MINUTES = env_float("AGENTWEB_ESCALATE_AFTER_MINUTES", 0, minimum=0)
AGENTWEB_ESCALATION_GROUP = env_str("AGENTWEB_ESCALATION_GROUP")
if AGENTWEB_ESCALATE_AFTER_MINUTES and not AGENTWEB_ESCALATION_GROUP:
    raise ImproperlyConfigured(
        "AGENTWEB_ESCALATE_AFTER_MINUTES needs AGENTWEB_ESCALATION_GROUP: the Django group "
        "whose members are told when nobody decided in time"
    )
AGENTWEB_APPROVAL_REMIND_MINUTES = env_float("AGENTWEB_APPROVAL_REMIND_MINUTES", 60, minimum=0)

# --- Tickets in (agentweb/tickets): the mailbox beat polls, and rules that start runs.
AGENTWEB_IMAP = parse_imap_url(env_str("AGENTWEB_IMAP_URL"))
AGENTWEB_IMAP_POLL_SECONDS = env_int("AGENTWEB_IMAP_POLL_SECONDS", 30, minimum=2)
AGENTWEB_INTAKE_RULES = parse_intake_rules(env_str("AGENTWEB_INTAKE_RULES"))

# --- Auth. Failed logins are throttled per user name and address (django-axes): after
# AGENTWEB_LOGIN_FAILURES failures that pair is locked for AGENTWEB_LOGIN_COOLOFF_MINUTES.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "agentweb.accounts.backends.LocalBackend",
]
AXES_FAILURE_LIMIT = env_int("AGENTWEB_LOGIN_FAILURES", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("AGENTWEB_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked.html"
AXES_VERBOSE = False
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/tickets/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
# Company sign-in with OpenID Connect (README, Company sign-in): off unless OIDC_ISSUER is
# set. The provider's endpoints come from its discovery document, fetched when first needed
# (an issuer that cannot be reached does not stop start-up: agentweb/accounts/oidc.py).
OIDC_ISSUER = issuer_url(env_str("OIDC_ISSUER"))
OIDC_CLIENT_ID = env_str("OIDC_CLIENT_ID")
OIDC_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET")
OIDC_ROLES_CLAIM = env_str("OIDC_ROLES_CLAIM", "groups")
OIDC_ROLES_MAP = parse_roles_map(env_str("OIDC_ROLES_MAP"))
OIDC_DISPLAY_NAME = env_str("OIDC_DISPLAY_NAME")
# 0: no password form on the login page; only superusers sign in with a password (/admin/).
AGENTWEB_LOCAL_LOGIN = env_bool("AGENTWEB_LOCAL_LOGIN", True)
if OIDC_ISSUER:
    for _name in ("OIDC_CLIENT_ID", "OIDC_CLIENT_SECRET"):
        if not globals()[_name]:
            raise ImproperlyConfigured(f"{_name} must be set when OIDC_ISSUER is set")
    if not OIDC_ROLES_CLAIM:
        raise ImproperlyConfigured("OIDC_ROLES_CLAIM must not be empty (default: groups)")
    OIDC_DISPLAY_NAME = OIDC_DISPLAY_NAME or str(urlsplit(OIDC_ISSUER).hostname)
    AUTHENTICATION_BACKENDS.append("agentweb.accounts.oidc.OIDCBackend")
    # mozilla-django-oidc's own settings, from ours (the endpoints come from discovery).
    OIDC_RP_CLIENT_ID = OIDC_CLIENT_ID
    OIDC_RP_CLIENT_SECRET = OIDC_CLIENT_SECRET
    OIDC_RP_SCOPES = "openid email profile"
    OIDC_USE_NONCE = True
    OIDC_USE_PKCE = True
    OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
    OIDC_STORE_ID_TOKEN = True  # the end-session request's id_token_hint
    OIDC_TIMEOUT = 10
    OIDC_OP_LOGOUT_URL_METHOD = "agentweb.accounts.oidc.logout_url"
else:
    for _name in ("OIDC_CLIENT_ID", "OIDC_CLIENT_SECRET", "OIDC_ROLES_MAP"):
        if env_str(_name):
            raise ImproperlyConfigured(f"{_name} is set but OIDC_ISSUER is not: set both")
    if not AGENTWEB_LOCAL_LOGIN:
        raise ImproperlyConfigured(
            "AGENTWEB_LOCAL_LOGIN=0 needs OIDC_ISSUER: without company sign-in nobody but a "
            "superuser at /admin/ could sign in"
        )
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# Content-Security-Policy (django-csp): scripts and styles from this site only; no inline
# script, no eval (htmx is configured without eval and without its inline indicator style).
# Style attributes stay allowed (widths of timing bars).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

if OIDC_ISSUER:
    # Logging out is a form whose answer redirects to the issuer's end-session endpoint;
    # form-action covers where a form's redirects lead too.
    _issuer = urlsplit(OIDC_ISSUER)
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"].append(
        f"{_issuer.scheme}://{_issuer.netloc}"
    )

# Request bodies (forms and the JSON API; uploaded files are limited by the import view).
DATA_UPLOAD_MAX_MEMORY_SIZE = 1_000_000
DATA_UPLOAD_MAX_NUMBER_FIELDS = 2000

# --- Security (production defaults; `manage.py check --deploy` passes with DEBUG off).
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # The container health check asks over plain HTTP inside the container.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- Observability (README, Observability; traces are configured by the standard OTEL_* variables).
AGENTWEB_METRICS_TOKEN = env_str("AGENTWEB_METRICS_TOKEN")
AGENTWEB_LOG_FORMAT = env_str("AGENTWEB_LOG_FORMAT", "plain").lower()
if AGENTWEB_LOG_FORMAT not in {"plain", "json"}:
    raise ImproperlyConfigured("AGENTWEB_LOG_FORMAT must be 'plain' or 'json'")
LOGGING = logging_config(AGENTWEB_LOG_FORMAT, os.environ.get("LOG_LEVEL", "INFO"))
WHITENOISE_USE_FINDERS = DEBUG
