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
//   toolhost     the resource server's own credentials, for introspection
import { generateKeyPairSync } from "node:crypto";
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

const server = createServer();
await new Promise((resolve) => server.listen(port, "127.0.0.1", resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: [
    client("test-client"),
    client("es-client"),
    client("expiring"),
    client("opaque"),
    client("toolhost", { redirect_uris: [], grant_types: [], response_types: [] }),
  ],
  jwks: { keys: [key("rsa", { modulusLength: 2048 }, "RS256"), key("ec", { namedCurve: "P-256" }, "ES256")] },
  scopes: ["openid", "offline_access", "mcp"],
  claims: { openid: ["sub"], groups: ["groups"] },
  pkce: { required: () => true },
  async findAccount(ctx, id) {
    return { accountId: id, async claims() { return { sub: id, groups: USERS[id]?.groups ?? [] }; } };
  },
  async extraTokenClaims(ctx, token) {
    return token.accountId ? { groups: USERS[token.accountId]?.groups ?? [] } : undefined;
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
// The resource server asks introspection as a client of its own.
provider.on("server_error", (ctx, err) => console.error("idp server_error:", err));
server.on("request", provider.callback());
console.log(JSON.stringify({ issuer }));
