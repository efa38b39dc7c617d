"""Company sign-in with OpenID Connect, on mozilla-django-oidc (DESIGN §15).

The library runs the flow: the authorization request with state, nonce and a PKCE
challenge (S256) kept in the session, the callback that checks the state and hands the
code with its verifier to the token endpoint, the ID token's signature against the
issuer's JWKS. What it leaves open is filled here, through its own hooks:

- the endpoints come from the issuer's discovery document (``OIDC_ISSUER`` +
  ``/.well-known/openid-configuration``), fetched when first needed, kept for an hour and,
  while the issuer cannot be reached, asked again at most every ``RETRY_SECONDS`` (or when
  someone clicks "Sign in"): an issuer that is down never stops agentweb from starting;
- the ID token's issuer, audience (and ``azp``), expiry and nonce are verified, with the
  algorithms the discovery lists (asymmetric ones only);
- the client authenticates with ``client_secret_basic`` or ``client_secret_post``, as the
  discovery allows;
- an account is the issuer's subject (``OidcIdentity``), created on first sign-in with the
  username from ``preferred_username`` and the email from ``email``; roles are set from
  ``OIDC_ROLES_CLAIM`` through ``OIDC_ROLES_MAP`` at every sign-in;
- every refusal raises ``Refused``, which names the check that failed, so the callback
  page can say what went wrong instead of a bare 400.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import jwt
import requests
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import SuspiciousOperation, ValidationError
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from agentweb.accounts.models import ROLE_ADMIN, ROLE_APPROVER, ROLE_OPERATOR, OidcIdentity
from agentweb.accounts.roles import ensure_roles

log = logging.getLogger("agentweb.accounts.oidc")

RETRY_SECONDS = 30.0  # an issuer that could not be reached is asked again after this long
REFRESH_SECONDS = 3600.0  # a discovery document is fetched again after this long
DISCOVERY_TIMEOUT = 5.0
LEEWAY_SECONDS = 60  # clock difference allowed on exp and iat
# Signature algorithms an ID token may use: asymmetric only (an HS256 token would be
# checked with the client secret, which the whole company's IdP admins know).
ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
ROLES = (ROLE_OPERATOR, ROLE_APPROVER, ROLE_ADMIN)


class Unavailable(Exception):
    """Sign-in through the issuer cannot start now; ``str()`` says why, for the login page."""


class Refused(Exception):
    """A sign-in we refuse: ``what`` names the check, ``str()`` says it for a person."""

    def __init__(self, what: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.what = what
        self.status = status


@dataclass(frozen=True)
class Issuer:
    """What the discovery document says, checked and reduced to what we use."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str
    end_session_endpoint: str
    client_auth: str  # client_secret_basic | client_secret_post
    algorithms: tuple[str, ...]
    scope: str


def display_name() -> str:
    return str(settings.OIDC_DISPLAY_NAME or "single sign-on")


def enabled() -> bool:
    return bool(settings.OIDC_ISSUER)


def _reason(exc: requests.RequestException) -> str:
    if isinstance(exc, requests.Timeout):
        return "timed out"
    if isinstance(exc, requests.ConnectionError):
        return "connection failed"
    return type(exc).__name__


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def parse_discovery(doc: Any, configured: str, roles_claim: str = "groups") -> Issuer:
    """The issuer from a discovery document, or ``Unavailable`` naming what is wrong."""
    if not isinstance(doc, dict):
        raise Unavailable("its discovery document is not a JSON object")
    issuer = doc.get("issuer")
    if not isinstance(issuer, str) or issuer.rstrip("/") != configured.rstrip("/"):
        raise Unavailable(
            f"OIDC_ISSUER is {configured!r} but its discovery document names the issuer "
            f"{issuer!r}; set OIDC_ISSUER to the issuer exactly"
        )
    missing = [
        key
        for key in ("authorization_endpoint", "token_endpoint", "jwks_uri")
        if not isinstance(doc.get(key), str) or not doc[key].startswith(("https://", "http://"))
    ]
    if missing:
        raise Unavailable(f"its discovery document has no {', '.join(missing)}")
    if "code" not in _strings(doc.get("response_types_supported")):
        raise Unavailable("it does not offer the authorization code flow (response type code)")
    challenges = doc.get("code_challenge_methods_supported")
    if challenges is not None and "S256" not in _strings(challenges):
        raise Unavailable("it does not offer PKCE with S256 (code_challenge_methods_supported)")
    # Absent means client_secret_basic (OpenID Connect Discovery 1.0, section 3).
    methods = _strings(doc.get("token_endpoint_auth_methods_supported")) or ["client_secret_basic"]
    client_auth = next(
        (m for m in ("client_secret_basic", "client_secret_post") if m in methods), None
    )
    if client_auth is None:
        raise Unavailable(
            "its token endpoint takes neither client_secret_basic nor client_secret_post "
            f"(it offers {', '.join(methods)})"
        )
    offered = _strings(doc.get("id_token_signing_alg_values_supported")) or ["RS256"]
    algorithms = tuple(a for a in offered if a in ALGORITHMS)
    if not algorithms:
        raise Unavailable(
            f"it signs ID tokens only with {', '.join(offered)}; agentweb needs one of "
            f"{', '.join(sorted(ALGORITHMS))}"
        )
    scopes = ["openid", "email", "profile"]
    root_claim = roles_claim.split(".")[0]
    if root_claim in _strings(doc.get("scopes_supported")) and root_claim not in scopes:
        scopes.append(root_claim)  # e.g. Okta's "groups" scope; others send it unasked
    end_session = doc.get("end_session_endpoint")
    userinfo = doc.get("userinfo_endpoint")
    return Issuer(
        issuer=issuer,
        authorization_endpoint=doc["authorization_endpoint"],
        token_endpoint=doc["token_endpoint"],
        jwks_uri=doc["jwks_uri"],
        userinfo_endpoint=userinfo if isinstance(userinfo, str) else "",
        end_session_endpoint=end_session if isinstance(end_session, str) else "",
        client_auth=client_auth,
        algorithms=algorithms,
        scope=" ".join(scopes),
    )


def _discover() -> Issuer:
    configured = str(settings.OIDC_ISSUER)
    url = configured.rstrip("/") + "/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=DISCOVERY_TIMEOUT)
    except requests.RequestException as exc:
        raise Unavailable(f"{url} cannot be reached ({_reason(exc)})") from None
    if response.status_code != 200:
        raise Unavailable(f"{url} answered HTTP {response.status_code}")
    try:
        doc = response.json()
    except ValueError:
        raise Unavailable(f"{url} did not answer with JSON") from None
    return parse_discovery(doc, configured, str(settings.OIDC_ROLES_CLAIM))


class _Discovery:
    """The process's one copy of the discovery document (web threads share it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.found: Issuer | None = None
        self.found_at = 0.0
        self.failure = ""
        self.failed_at = 0.0

    def get(self, retry: bool) -> Issuer:
        with self.lock:
            now = time.monotonic()
            if self.found is not None and now - self.found_at < REFRESH_SECONDS:
                return self.found
            if (
                self.found is None
                and self.failure
                and not retry
                and now - self.failed_at < RETRY_SECONDS
            ):
                raise Unavailable(self.failure)
            try:
                found = _discover()
            except Unavailable as exc:
                log.warning("sign-in with %s unavailable: %s", display_name(), exc)
                self.failure, self.failed_at = str(exc), now
                if self.found is not None:  # keep the last good one; ask again soon
                    self.found_at = now - REFRESH_SECONDS + RETRY_SECONDS
                    return self.found
                raise
            if self.found is None or self.failure:
                log.info("sign-in with %s: discovered %s", display_name(), found.issuer)
            self.found, self.found_at, self.failure = found, now, ""
            return found

    def forget(self) -> None:
        with self.lock:
            self.found, self.found_at, self.failure, self.failed_at = None, 0.0, "", 0.0


_discovery = _Discovery()


def issuer(retry: bool = False) -> Issuer:
    """The configured issuer's endpoints, or ``Unavailable`` saying why sign-in through it
    cannot start. ``retry``: ask again now even if it failed moments ago (a person clicked)."""
    return _discovery.get(retry)


def forget_discovery() -> None:
    """Drop what was discovered (tests; a changed configuration)."""
    _discovery.forget()


def logout_url(request: HttpRequest) -> str:
    """Where logging out sends the browser (the library's ``OIDC_OP_LOGOUT_URL_METHOD``):
    the issuer's ``end_session_endpoint`` for a session that signed in through it, so the
    company session ends too, back to our login page; else our login page."""
    after = str(settings.LOGOUT_REDIRECT_URL)
    id_token = request.session.get("oidc_id_token")
    if not id_token or not enabled():
        return after
    try:
        found = issuer()
    except Unavailable:
        return after  # the local session still ends (the view logs out after asking here)
    if not found.end_session_endpoint:
        return after
    query = urlencode(
        {
            "id_token_hint": id_token,
            "post_logout_redirect_uri": request.build_absolute_uri(after),
            "client_id": settings.OIDC_CLIENT_ID,
        }
    )
    joiner = "&" if "?" in found.end_session_endpoint else "?"
    return f"{found.end_session_endpoint}{joiner}{query}"


def _claim(claims: dict[str, Any], path: str) -> Any:
    """A claim by name, or by a dotted path into nested objects (``realm_access.roles``)."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def roles_from_claims(
    claims: dict[str, Any], claim: str, mapping: dict[str, tuple[str, ...]]
) -> set[str]:
    value = _claim(claims, claim)
    groups: Iterable[Any] = [value] if isinstance(value, str) else value or []
    if not isinstance(groups, list | tuple):
        groups = []
    return {role for group in groups if isinstance(group, str) for role in mapping.get(group, ())}


def set_roles(user: User, roles: set[str]) -> None:
    """Exactly these of the three roles; groups that are not roles stay as they are."""
    role_groups = ensure_roles()
    before = {g.name for g in user.groups.filter(name__in=ROLES)}
    if before == roles:
        return
    others = list(user.groups.exclude(name__in=ROLES))
    user.groups.set([*others, *(role_groups[r] for r in sorted(roles))])
    log.info(
        "roles of %s set by %s: %s (were: %s)",
        user.username,
        display_name(),
        ", ".join(sorted(roles)) or "none",
        ", ".join(sorted(before)) or "none",
    )


class OIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend with the endpoints from discovery and the checks the
    library leaves out (issuer, audience, the discovered algorithms)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The library reads fixed endpoints from settings here. Django builds every backend
        # for every password sign-in too, so nothing here may ask the issuer anything:
        # the endpoints are looked up when a callback is being handled.
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = "RS256"
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.OIDC_OP_TOKEN_ENDPOINT = ""
        self.OIDC_OP_USER_ENDPOINT = ""
        self.OIDC_OP_JWKS_ENDPOINT = ""
        self.UserModel = User
        self.found: Issuer | None = None

    @property
    def provider(self) -> Issuer:
        assert self.found is not None, "used outside authenticate()"
        return self.found

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        # Only the callback view passes a nonce: a password form posted to a URL with
        # ?code=&state= in it must not start a token request.
        if request is None or "nonce" not in kwargs or not enabled():
            return None
        try:
            self.found = issuer()
        except Unavailable as exc:
            message = f"{display_name()} cannot be reached: {exc}"
            raise Refused("unavailable", message, 502) from None
        self.OIDC_OP_TOKEN_ENDPOINT = self.provider.token_endpoint
        self.OIDC_OP_USER_ENDPOINT = self.provider.userinfo_endpoint
        self.OIDC_OP_JWKS_ENDPOINT = self.provider.jwks_uri
        user: User | None = super().authenticate(request, **kwargs)
        return user

    def get_user(self, user_id: Any) -> User | None:
        user = User.objects.filter(pk=user_id).first()
        return user if user is not None and user.is_active else None

    # --- the token request ---------------------------------------------------------

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        data = dict(payload)
        auth: tuple[str, str] | None = None
        if self.provider.client_auth == "client_secret_basic":
            # RFC 6749 §2.3.1: both are form-encoded before they go into the header.
            secret = data.pop("client_secret")
            auth = (quote(str(data["client_id"]), safe=""), quote(str(secret), safe=""))
        try:
            response = requests.post(
                self.provider.token_endpoint, data=data, auth=auth, timeout=settings.OIDC_TIMEOUT
            )
        except requests.RequestException as exc:
            raise Refused(
                "unreachable",
                f"the token endpoint of {display_name()} cannot be reached ({_reason(exc)})",
                502,
            ) from None
        if response.status_code != 200:
            raise _token_refusal(response)
        try:
            info = response.json()
        except ValueError:
            info = None
        if not isinstance(info, dict):
            raise Refused("token", "the token endpoint did not answer with a JSON object", 502)
        return info

    # --- the ID token ----------------------------------------------------------------

    def verify_token(self, token: Any, **kwargs: Any) -> dict[str, Any]:
        if not isinstance(token, str) or not token:
            raise Refused("id_token", "the token response carried no ID token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise Refused("id_token", "the ID token is not a well-formed JWT") from None
        alg = header.get("alg")
        if alg not in self.provider.algorithms:
            raise Refused(
                "signature",
                f"the ID token is signed with {alg!r}, which the issuer's discovery does not "
                f"list for ID tokens ({', '.join(self.provider.algorithms)})",
            )
        try:
            key = self.retrieve_matching_jwk(token)
        except (SuspiciousOperation, KeyError):
            raise Refused(
                "signature",
                f"the ID token is signed with a key the issuer does not publish (key id "
                f"{header.get('kid')!r} is not among the keys at {self.provider.jwks_uri})",
            ) from None
        except requests.RequestException as exc:
            raise Refused(
                "unreachable", f"the issuer's keys cannot be fetched ({_reason(exc)})", 502
            ) from None
        payload = self._verify_jws(token, key)
        if "nonce" in kwargs and payload.get("nonce") != kwargs["nonce"]:
            raise Refused(
                "nonce",
                "the ID token's nonce is not the one this sign-in sent: the token belongs to "
                "another sign-in (replayed or injected)",
            )
        return payload

    def _verify_jws(self, payload: Any, key: Any) -> dict[str, Any]:
        provider, client_id = self.provider, str(self.OIDC_RP_CLIENT_ID)
        try:
            claims: dict[str, Any] = jwt.decode(
                payload,
                key,
                algorithms=list(provider.algorithms),
                audience=client_id,
                issuer=provider.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["iss", "sub", "aud", "exp", "iat"]},
            )
        except jwt.InvalidSignatureError:
            raise Refused(
                "signature",
                "the ID token's signature does not verify with the issuer's published key: "
                "it was not signed by the issuer",
            ) from None
        except jwt.InvalidAudienceError:
            aud = jwt.decode(payload, options={"verify_signature": False}).get("aud")
            raise Refused(
                "audience",
                f"the ID token was issued for another application (audience {aud!r}), "
                f"not for this one ({client_id!r})",
            ) from None
        except jwt.InvalidIssuerError:
            iss = jwt.decode(payload, options={"verify_signature": False}).get("iss")
            raise Refused(
                "issuer",
                f"the ID token comes from another issuer ({iss!r}, expected {provider.issuer!r})",
            ) from None
        except jwt.ExpiredSignatureError:
            raise Refused(
                "expired",
                "the ID token has expired (are the clocks of agentweb and the identity "
                "provider far apart?)",
            ) from None
        except (jwt.ImmatureSignatureError, jwt.InvalidIssuedAtError):
            message = "the ID token is dated in the future (are the clocks far apart?)"
            raise Refused("expired", message) from None
        except jwt.MissingRequiredClaimError as exc:
            raise Refused("id_token", f"the ID token has no {exc.claim!r} claim") from None
        except jwt.InvalidTokenError as exc:
            raise Refused("id_token", f"the ID token is not valid: {exc}") from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != client_id:
            raise Refused(
                "audience",
                f"the ID token names several audiences and its authorized party "
                f"({claims.get('azp')!r}) is not this application ({client_id!r})",
            )
        return claims

    # --- the account -----------------------------------------------------------------

    def get_userinfo(self, access_token: Any, id_token: Any, payload: Any) -> dict[str, Any]:
        """The ID token's claims, completed by the userinfo endpoint when there is one
        (which must answer for the same subject)."""
        claims = dict(payload)
        endpoint = self.provider.userinfo_endpoint
        if not endpoint or not access_token:
            return claims
        try:
            response = requests.get(
                endpoint,
                headers={"Authorization": f"Bearer {access_token}"},
                timeout=settings.OIDC_TIMEOUT,
            )
        except requests.RequestException as exc:
            raise Refused(
                "unreachable", f"the userinfo endpoint cannot be reached ({_reason(exc)})", 502
            ) from None
        if response.status_code != 200:
            raise Refused("userinfo", f"the userinfo endpoint answered HTTP {response.status_code}")
        if response.headers.get("content-type", "").lower().startswith("application/jwt"):
            info: Any = self.verify_token(response.text)
        else:
            try:
                info = response.json()
            except ValueError:
                info = None
        if not isinstance(info, dict):
            raise Refused("userinfo", "the userinfo endpoint did not answer with a JSON object")
        if info.get("sub") != claims.get("sub"):
            raise Refused(
                "userinfo", "the userinfo endpoint answered for another subject than the ID token"
            )
        for key in ("iss", "aud", "nonce", "exp", "iat"):  # the ID token's, verified
            info.pop(key, None)
        claims.update(info)
        return claims

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        username_from(claims)  # refuses a sign-in that cannot become an account
        return True

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        """The account this identity signs in as: the one linked to its subject, else an
        unlinked account of the same username (a local account moving to company
        sign-in), never a superuser's."""
        linked = User.objects.filter(
            oidc_identities__issuer=self.provider.issuer,
            oidc_identities__subject=str(claims["sub"]),
        )
        if linked.exists():
            return linked
        username = username_from(claims)
        same = User.objects.filter(username=username)
        found = same.first()
        if found is None:
            return same
        if found.is_superuser:
            raise Refused(
                "account",
                f"agentweb has a superuser named {username!r}; company sign-in does not take "
                "over a superuser's account (an administrator can rename one of the two)",
            )
        if OidcIdentity.objects.filter(user=found).exists():
            raise Refused(
                "account",
                f"the agentweb account {username!r} belongs to another {display_name()} "
                "identity; an administrator must rename or remove it first",
            )
        return same

    def create_user(self, claims: dict[str, Any]) -> User:
        try:
            with transaction.atomic():
                user = User.objects.create_user(
                    username_from(claims), email=_email(claims) or "", password=None
                )
                return self.update_user(user, claims)
        except IntegrityError:  # the same person signing in twice at once
            message = "your account was being created at the same moment: sign in again"
            raise Refused("account", message) from None

    def update_user(self, user: User, claims: dict[str, Any]) -> User:
        OidcIdentity.objects.update_or_create(
            issuer=self.provider.issuer,
            subject=str(claims["sub"]),
            defaults={"user": user, "last_login_at": timezone.now()},
        )
        email = _email(claims)
        if email and email != user.email:
            user.email = email
            user.save(update_fields=["email"])
        if settings.OIDC_ROLES_MAP:  # else roles are given in agentweb (/admin/)
            set_roles(
                user, roles_from_claims(claims, settings.OIDC_ROLES_CLAIM, settings.OIDC_ROLES_MAP)
            )
        return user


def username_from(claims: dict[str, Any]) -> str:
    """``preferred_username`` (else the email address), as a valid Django username."""
    value = claims.get("preferred_username") or claims.get("email")
    if not isinstance(value, str) or not value.strip():
        raise Refused(
            "claims",
            f"{display_name()} sent neither preferred_username nor email, so no account name "
            "can be made for you",
        )
    value = value.strip()
    try:
        UnicodeUsernameValidator()(value)
        if len(value) > 150:
            raise ValidationError("too long")
    except ValidationError:
        raise Refused(
            "claims",
            f"the user name {value[:160]!r} from {display_name()} cannot be an agentweb user name "
            "(at most 150 letters, digits and @ . + - _)",
        ) from None
    return value


def _email(claims: dict[str, Any]) -> str:
    value = claims.get("email")
    return value.strip() if isinstance(value, str) and len(value) <= 254 else ""


def _token_refusal(response: requests.Response) -> Refused:
    try:
        body = response.json()
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    error = str(body.get("error") or f"HTTP {response.status_code}")[:100]
    description = str(body.get("error_description") or "")[:300]
    said = f"{error}: {description}" if description else error
    if error == "invalid_grant":
        return Refused(
            "code",
            f"{display_name()} refused the authorization code: it was already used, has "
            f"expired, or belongs to another sign-in ({said})",
        )
    if error == "invalid_client":
        return Refused(
            "client",
            f"{display_name()} does not accept this application's client id or secret "
            f"({said}); an administrator must check OIDC_CLIENT_ID and OIDC_CLIENT_SECRET",
            502,
        )
    return Refused("token", f"the token request was refused ({said})", 502)
