// A real OpenID provider for the tests: the certified `oidc-provider` package, with two
// users in different groups, JWT access tokens bound to a resource (RFC 8707), dynamic
// client registration, introspection and revocation.
//
// usage: node idp.mjs PROVIDER PORT KID
//   PROVIDER: oidc-provider's lib/index.js (TOOLHOST_TEST_OIDC_PROVIDER, which `cargo xtask
//   test` installs); PORT 0: any; KID names the signing keys, made fresh at each start.
// Prints one JSON line when it listens: {"issuer": "..."}.
//
// Clients known from the start (besides those that register):
//   test-client  authorization code + PKCE, JWT access tokens (RS256)
//   es-client    the same, tokens signed ES256
//   expiring     the same, access tokens that live 1 s
//   opaque       the same, opaque access tokens (checked by introspection)
//   toolhost-console  the web console's public client (PKCE, loopback redirect)
//   toolhost     the resource server's own client: introspection, and token exchange
//                (RFC 8693) of a caller's access token for one to a mounted server
import { createPublicKey, generateKeyPairSync, verify } from "node:crypto";
import { createServer } from "node:http";

const { default: Provider } = await import(process.argv[2]);
const [port, kid] = [Number(process.argv[3] ?? 0), process.argv[4] ?? "key-1"];
const USERS = {
  alice: { groups: ["dev"] },
  bob: { groups: ["ops"] },
};
const REDIRECT = "http://127.0.0.1:9/callback";
const client = (client_id, extra = {}) => ({
  client_id,
  client_secret: `${client_id}-secret-0123456789`,
  redirect_uris: [REDIRECT],
  grant_types: ["authorization_code", "refresh_token"],
  response_types: ["code"],
  token_endpoint_auth_method: "client_secret_basic",
  ...extra,
});
const key = (type, options, alg) => ({
  ...generateKeyPairSync(type, options).privateKey.export({ format: "jwk" }),
  kid: `${kid}-${alg}`,
  alg,
  use: "sig",
});

const EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token";

/// The claims of a JWT this provider signed (and that has not expired), else null.
function verified(token, jwks) {
  const [header, payload, signature] = token.split(".");
  if (!signature) return null;
  const { kid, alg } = JSON.parse(Buffer.from(header, "base64url"));
  const jwk = jwks.find((k) => k.kid === kid && k.alg === alg);
  if (!jwk) return null;
  const { d, p, q, dp, dq, qi, ...pub } = jwk;
  const key = createPublicKey({ key: pub, format: "jwk" });
  const ok = verify(alg === "RS256" ? "RSA-SHA256" : "SHA256", Buffer.from(`${header}.${payload}`),
    alg === "ES256" ? { key, dsaEncoding: "ieee-p1363" } : key, Buffer.from(signature, "base64url"));
  const claims = JSON.parse(Buffer.from(payload, "base64url"));
  return ok && claims.exp > Date.now() / 1000 ? claims : null;
}

const signing = [key("rsa", { modulusLength: 2048 }, "RS256"), key("ec", { namedCurve: "P-256" }, "ES256")];
const server = createServer();
await new Promise((resolve) => server.listen(port, "127.0.0.1", resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: [
    client("test-client"),
    client("es-client"),
    client("expiring"),
    client("opaque"),
    client("toolhost", { redirect_uris: [], grant_types: [EXCHANGE], response_types: [] }),
    // The web console's public client: PKCE, back to the console on any loopback port.
    {
      client_id: "toolhost-console",
      application_type: "native",
      token_endpoint_auth_method: "none",
      redirect_uris: ["http://127.0.0.1/"],
      grant_types: ["authorization_code"],
      response_types: ["code"],
    },
  ],
  jwks: { keys: signing },
  scopes: ["openid", "offline_access", "mcp"],
  claims: { openid: ["sub"], groups: ["groups"] },
  pkce: { required: () => true },
  // A client that asks for refresh tokens gets them (toolhost's own login keeps one).
  async issueRefreshToken(ctx, client, code) {
    return client.grantTypeAllowed("refresh_token");
  },
  async findAccount(ctx, id) {
    return { accountId: id, async claims() { return { sub: id, groups: USERS[id]?.groups ?? [] }; } };
  },
  async extraTokenClaims(ctx, token) {
    if (!token.accountId) return undefined;
    const claims = { groups: USERS[token.accountId]?.groups ?? [] };
    // An exchanged token names who acts for the user (RFC 8693 `act`).
    if (token.gty === EXCHANGE) claims.act = { sub: token.clientId };
    return claims;
  },
  // Every user grants what a client asks: the login is the test's only interaction.
  async loadExistingGrant(ctx) {
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope("openid offline_access mcp");
    for (const resource of [ctx.oidc.params.resource].flat().filter(Boolean)) {
      grant.addResourceScope(resource, "mcp");
    }
    await grant.save();
    return grant;
  },
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    introspection: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      async getResourceServerInfo(ctx, resource, client) {
        const opaque = client.clientId === "opaque";
        return {
          scope: "mcp",
          audience: resource,
          accessTokenTTL: client.clientId === "expiring" ? 1 : 3600,
          accessTokenFormat: opaque ? "opaque" : "jwt",
          ...(opaque ? {} : { jwt: { sign: { alg: client.clientId === "es-client" ? "ES256" : "RS256" } } }),
        };
      },
    },
  },
  ttl: { AccessToken: (ctx, token) => token.resourceServer?.accessTokenTTL ?? 3600, AuthorizationCode: 60, Grant: 3600, Interaction: 600, Session: 3600, RefreshToken: 3600 },
});
// Token exchange (RFC 8693) for the resource server's own client: a caller's access token
// (the subject) for a token to another resource, for the same user.
provider.registerGrantType(EXCHANGE, async (ctx) => {
  const { subject_token, subject_token_type, resource } = ctx.oidc.params;
  const { client } = ctx.oidc;
  const refuse = (error, error_description) => {
    ctx.status = 400;
    ctx.body = { error, error_description };
  };
  if (client.clientId !== "toolhost") return refuse("unauthorized_client", "only toolhost exchanges tokens here");
  if (subject_token_type !== ACCESS_TOKEN) return refuse("invalid_request", "subject_token_type must be an access token");
  const subject = verified(subject_token, signing);
  if (!subject || subject.iss !== issuer) return refuse("invalid_grant", "the subject token is not a valid token of this issuer");
  if (!resource) return refuse("invalid_target", "name the resource the new token is for");
  const token = new provider.AccessToken({ accountId: subject.sub, client, scope: "mcp", gty: EXCHANGE });
  token.resourceServer = new provider.ResourceServer(resource, {
    audience: resource, scope: "mcp", accessTokenTTL: 600, accessTokenFormat: "jwt", jwt: { sign: { alg: "RS256" } },
  });
  const value = await token.save();
  ctx.body = { access_token: value, issued_token_type: ACCESS_TOKEN, token_type: "Bearer", expires_in: token.expiration, scope: "mcp" };
}, ["subject_token", "subject_token_type", "resource", "audience", "scope", "requested_token_type"]);
// The resource server asks introspection as a client of its own.
provider.on("server_error", (ctx, err) => console.error("idp server_error:", err));
server.on("request", provider.callback());
console.log(JSON.stringify({ issuer }));
