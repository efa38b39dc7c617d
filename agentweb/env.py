"""Small typed readers for configuration from the environment.

Every reader raises ``ImproperlyConfigured`` naming the variable when its value is bad,
so a misconfigured installation stops at start-up with a message that says what to fix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str, env: Mapping[str, str] | None) -> str | None:
    return (env if env is not None else os.environ).get(name)


def env_str(name: str, default: str = "", env: Mapping[str, str] | None = None) -> str:
    value = _raw(name, env)
    if value is None:
        # Docker/Kubernetes secrets: FOO_FILE names a file that holds FOO.
        path = _raw(f"{name}_FILE", env)
        if path:
            try:
                with open(path, encoding="utf-8") as fh:
                    return fh.read().strip()
            except OSError as exc:
                raise ImproperlyConfigured(f"{name}_FILE: cannot read {path!r}: {exc}") from exc
        return default
    return value.strip()


def env_bool(name: str, default: bool, env: Mapping[str, str] | None = None) -> bool:
    value = _raw(name, env)
    if value is None:
        return default
    low = value.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {value!r}")


def env_int(
    name: str, default: int, env: Mapping[str, str] | None = None, minimum: int | None = None
) -> int:
    value = _raw(name, env)
    if value is None or not value.strip():
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {number}")
    return number


def env_float(
    name: str,
    default: float,
    env: Mapping[str, str] | None = None,
    minimum: float | None = None,
    above: float | None = None,
) -> float:
    """A number that may have decimals (``0.05`` minutes is 3 s), finite; ``minimum`` is
    the least value allowed, ``above`` a value it must exceed."""
    value = _raw(name, env)
    if value is None or not value.strip():
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ImproperlyConfigured(f"{name} must be a finite number, got {value!r}")
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum:g}, got {number:g}")
    if above is not None and number <= above:
        raise ImproperlyConfigured(f"{name} must be more than {above:g}, got {number:g}")
    return number


def env_list(name: str, default: list[str], env: Mapping[str, str] | None = None) -> list[str]:
    value = _raw(name, env)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def database_from_url(url: str, name: str = "DATABASE_URL") -> dict[str, object]:
    """Django DATABASES entry from a postgres URL (TCP or unix socket via ?host=)."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql", "pgsql", "postgresql+psycopg"}:
        raise ImproperlyConfigured(
            f"{name} must be a PostgreSQL URL (postgresql://user:pass@host:port/db), "
            f"got scheme {parts.scheme!r}"
        )
    query = parse_qs(parts.query)
    host = unquote(parts.hostname or "") or query.get("host", [""])[0]
    dbname = unquote(parts.path.lstrip("/"))
    if not dbname:
        raise ImproperlyConfigured(f"{name} must name a database, got {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"{name} has an invalid port: {url!r}") from None
    options = {k: v[0] for k, v in query.items() if k not in {"host"}}
    return {
        "ENGINE": "agentweb.pgbackend",
        "NAME": dbname,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(port or ""),
        "OPTIONS": options,
    }


def database_pool(
    size: int, conn_max_age: int, *, installed: bool | None = None
) -> dict[str, object] | None:
    """Options of Django's psycopg pool holding at most ``size`` connections per process,
    or None for no pool: ``size`` 0, connections kept per thread (``conn_max_age`` > 0,
    which Django does not combine with a pool), or psycopg_pool not installed (warned)."""
    if size <= 0 or conn_max_age > 0:
        return None
    if installed is None:
        import importlib.util

        installed = importlib.util.find_spec("psycopg_pool") is not None
    if not installed:
        import warnings

        warnings.warn(
            "psycopg_pool is not installed (pip install -r requirements.txt): no connection "
            "pool, each request, task and tool call opens a PostgreSQL connection of its own",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    # min_size 0: an idle process holds no connection; a thread waits at most `timeout`
    # seconds for one (then OperationalError: 503 on the API), an idle one closes after
    # `max_idle` seconds.
    return {"min_size": 0, "max_size": size, "timeout": 10.0, "max_idle": 60.0}


def check_redis_url(url: str, name: str = "REDIS_URL") -> str:
    scheme = urlsplit(url).scheme
    if scheme not in {"redis", "rediss", "unix", "redis+socket"}:
        raise ImproperlyConfigured(
            f"{name} must be a redis:// or unix:// URL, got scheme {scheme!r}"
        )
    return url


def model_spec(value: str, name: str = "AGENTWEB_MODEL") -> str:
    if value == "demo":
        return value
    provider, _, model = value.partition(":")
    if provider not in {"openai", "anthropic"} or not model:
        raise ImproperlyConfigured(
            f"{name} must be 'demo', 'openai:<model>' or 'anthropic:<model>', got {value!r}"
        )
    return value


def redis_urls(url: str) -> tuple[str, str]:
    """(Celery broker URL, channels-redis host) for one REDIS_URL.

    A unix socket is spelt ``redis+socket://`` by Celery (kombu) and ``unix://`` by
    redis-py, which channels-redis uses; accept either spelling and give each its own.
    """
    check_redis_url(url)
    parts = urlsplit(url)
    if parts.scheme in {"unix", "redis+socket"}:
        path = parts.path
        query = f"?{parts.query}" if parts.query else ""
        return f"redis+socket://{path}{query}", f"unix://{path}{query}"
    return url, url


def parse_prices(value: str, name: str = "AGENTWEB_PRICES") -> dict[str, tuple[float, float]]:
    """``"model=in/out,..."`` in US dollars per million tokens."""
    prices: dict[str, tuple[float, float]] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        model, _, pair = item.partition("=")
        rate_in, _, rate_out = pair.partition("/")
        try:
            prices[model.strip()] = (float(rate_in), float(rate_out))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name} entries look like 'model=0.5/1.5' (input/output $ per 1M tokens), "
                f"got {item!r}"
            ) from None
    return prices


ROLES = ("operator", "approver", "admin")
_LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1"}


def issuer_url(value: str, name: str = "OIDC_ISSUER") -> str:
    """An OpenID issuer: https (plain http only on a loopback host, for tests), no query or
    fragment. Returned as given: the issuer is compared character for character."""
    if not value:
        return ""
    parts = urlsplit(value)
    if parts.scheme not in {"https", "http"} or not parts.hostname:
        raise ImproperlyConfigured(f"{name} must be an https:// URL, got {value!r}")
    if parts.scheme == "http" and parts.hostname not in _LOOPBACK_HOSTS:
        raise ImproperlyConfigured(
            f"{name} must use https:// (plain http only for a loopback address), got {value!r}"
        )
    if parts.query or parts.fragment:
        raise ImproperlyConfigured(f"{name} must not have a query or fragment, got {value!r}")
    return value


def parse_roles_map(value: str, name: str = "OIDC_ROLES_MAP") -> dict[str, tuple[str, ...]]:
    """``"idp-group=role,..."`` -> {group: (role, ...)}; a group may be named twice to give
    it two roles. Roles: operator, approver, admin."""
    mapping: dict[str, tuple[str, ...]] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        group, sep, role = (p.strip() for p in item.rpartition("="))
        if not sep or not group or not role:
            raise ImproperlyConfigured(
                f"{name} entries look like 'idp-group=role' (roles: {', '.join(ROLES)}), "
                f"got {item!r}"
            )
        if role not in ROLES:
            raise ImproperlyConfigured(
                f"{name}: {role!r} (for {group!r}) is not a role; roles are {', '.join(ROLES)}"
            )
        if role not in mapping.get(group, ()):
            mapping[group] = (*mapping.get(group, ()), role)
    return mapping
