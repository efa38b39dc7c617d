// A real OpenID provider for the sign-in tests: panva's oidc-provider (the version pinned in
// tests/fakes/node_tools.py) on a loopback port, with its own built-in login pages.
//
//   node oidc_provider.mjs <node_modules folder> <config JSON>
//
// config: {"port", "issuer", "clients": [{client_id, client_secret, redirect_uris,
// post_logout_redirect_uris, token_endpoint_auth_method}], "accounts": {"<login>":
// {"email", "name", "groups": [...]}}, "client_auth_methods"?: [...]}
//
// Any login and password sign in (the provider's development interactions); a login named
// in "accounts" gets its email, name and groups as claims, any other only its subject.
// Consent is given without asking, as a company's IdP does for its own applications.
//
// For the refusal tests the token endpoint can be told to hand out a bad ID token instead
// of the one the provider made: POST /_test/id_token {"mode": "normal" | "wrong_audience" |
// "wrong_issuer" | "wrong_nonce" | "foreign_key"}. The wrong_* modes re-sign the real
// token's claims, one changed, with the provider's own key (a valid signature on the wrong
// claims); foreign_key signs the real claims with another key under the same key id.
// Everything else (discovery, JWKS, PKCE, codes, sessions, end-session) is the provider's
// own behaviour. POST /_test/account {"login", "claims": {...}} changes an account's claims
// (its groups moved at the company).

import { generateKeyPairSync, createPrivateKey, sign } from 'node:crypto';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, rawConfig] = process.argv.slice(2);
const config = JSON.parse(rawConfig);
const { default: Provider } = await import(
  pathToFileURL(join(modules, 'oidc-provider', 'lib', 'index.js')).href
);

function rsaJwk(kid) {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid, alg: 'RS256', use: 'sig' };
}

const signingKey = rsaJwk('test-key-1');
const foreignKey = rsaJwk('test-key-1'); // same key id, another key: signature must fail
const accounts = config.accounts || {};
let idTokenMode = 'normal';

const provider = new Provider(config.issuer, {
  clients: config.clients,
  clientAuthMethods: config.client_auth_methods || ['client_secret_basic', 'client_secret_post'],
  jwks: { keys: [signingKey] },
  cookies: { keys: [randomBytes(16).toString('hex')] },
  scopes: ['openid', 'email', 'profile', 'groups'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  async findAccount(ctx, id) {
    const known = accounts[id] || {};
    return {
      accountId: id,
      async claims() {
        const claims = { sub: id, preferred_username: id };
        if (known.email) Object.assign(claims, { email: known.email, email_verified: true });
        if (known.name) claims.name = known.name;
        if (known.groups) claims.groups = known.groups;
        return claims;
      },
    };
  },
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId
      || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope(ctx.oidc.params.scope || 'openid');
    await grant.save();
    return grant;
  },
});
provider.proxy = false;

function b64url(value) {
  return Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');
}

function resign(idToken, mode) {
  const [header, payload] = idToken.split('.').slice(0, 2)
    .map((part) => JSON.parse(Buffer.from(part, 'base64url').toString()));
  let key = signingKey;
  if (mode === 'wrong_audience') payload.aud = 'another-application';
  else if (mode === 'wrong_issuer') payload.iss = 'http://issuer.invalid';
  else if (mode === 'wrong_nonce') payload.nonce = 'a-nonce-of-another-sign-in';
  else if (mode === 'foreign_key') key = foreignKey;
  const input = `${b64url(header)}.${b64url(payload)}`;
  const signature = sign('sha256', Buffer.from(input), createPrivateKey({ key, format: 'jwk' }));
  return `${input}.${signature.toString('base64url')}`;
}

provider.use(async (ctx, next) => {
  if (ctx.path.startsWith('/_test/') && ctx.method === 'POST') {
    const chunks = [];
    for await (const chunk of ctx.req) chunks.push(chunk);
    const body = JSON.parse(Buffer.concat(chunks).toString() || '{}');
    if (ctx.path === '/_test/id_token') {
      idTokenMode = body.mode || 'normal';
      ctx.body = { mode: idTokenMode };
    } else if (ctx.path === '/_test/account') {
      accounts[body.login] = body.claims;
      ctx.body = { login: body.login };
    } else {
      ctx.status = 404;
    }
    return;
  }
  await next();
  if (ctx.path === '/token' && ctx.status === 200 && idTokenMode !== 'normal'
      && ctx.body && ctx.body.id_token) {
    ctx.body = { ...ctx.body, id_token: resign(ctx.body.id_token, idTokenMode) };
  }
});

const server = provider.listen(config.port, '127.0.0.1', () => {
  console.log(`oidc-provider listening on ${config.issuer}`);
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
