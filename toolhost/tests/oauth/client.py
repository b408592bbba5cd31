"""An OAuth client of the test identity provider (idp.mjs) and of toolhost, for the tests.

It logs in the way a person would, through oidc-provider's login page (any password),
following its redirects with the cookies it sets.

usage:
  client.py token ISSUER CLIENT USER RESOURCE   authorization code + PKCE as CLIENT (one of
                                                idp.mjs's own), for USER, bound to
                                                RESOURCE; prints the token response
  client.py revoke ISSUER CLIENT TOKEN          revokes TOKEN at the issuer
  client.py follow AUTH_URL USER                logs USER in at an authorization URL another
                                                client made (toolhost mcp login) and takes
                                                the browser back to that client's redirect
  client.py sdk MCP_URL USER                    the official MCP Python SDK's OAuth client:
                                                discovery (RFC 9728, RFC 8414), dynamic
                                                registration, authorization code + PKCE,
                                                then tools/list and a read_file; prints
                                                what it saw
Each prints one JSON line.
"""

import asyncio
import base64
import hashlib
import json
import re
import secrets
import sys
from html import unescape
from urllib.parse import parse_qs, urlencode, urljoin, urlparse

import httpx2 as httpx

REDIRECT = "http://127.0.0.1:9/callback"


def login(auth_url, user):
    """Follows `auth_url` through the provider's login as `user`; returns the redirect to
    the client (its query holds the code and state)."""
    origin = "{0.scheme}://{0.netloc}".format(urlparse(auth_url))
    with httpx.Client(follow_redirects=False, timeout=10) as http:
        response = http.get(auth_url)
        for _ in range(20):
            location = response.headers.get("location")
            if response.is_redirect and location:
                url = urljoin(str(response.url), location)
                if not url.startswith(origin):
                    return url
                response = http.get(url)
                continue
            form = re.search(r'<form[^>]*action="([^"]+)"', response.text)
            if response.status_code != 200 or not form:
                raise SystemExit(f"the login stopped at {response.url}: {response.status_code} {response.text[:300]}")
            fields = {}
            for tag in re.findall(r"<input[^>]*>", response.text):
                name, value = re.search(r'name="([^"]+)"', tag), re.search(r'value="([^"]*)"', tag)
                if name:
                    fields[name.group(1)] = unescape(value.group(1)) if value else ""

            if "login" in fields:
                fields.update(login=user, password=user)
            response = http.post(unescape(form.group(1)), data=fields)
    raise SystemExit("the login went round in circles")


def token(issuer, client, user, resource):
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    state = secrets.token_urlsafe(16)
    query = urlencode({
        "client_id": client, "response_type": "code", "redirect_uri": REDIRECT, "scope": "openid mcp",
        "code_challenge": challenge, "code_challenge_method": "S256", "resource": resource, "state": state,
    })
    back = parse_qs(urlparse(login(f"{issuer}/auth?{query}", user)).query)
    if back.get("state") != [state] or "code" not in back:
        raise SystemExit(f"no code came back: {back}")
    answer = httpx.post(
        f"{issuer}/token",
        auth=(client, f"{client}-secret-0123456789"),
        data={"grant_type": "authorization_code", "code": back["code"][0], "redirect_uri": REDIRECT,
              "code_verifier": verifier, "resource": resource},
    )
    answer.raise_for_status()
    return answer.json()


def revoke(issuer, client, access_token):
    answer = httpx.post(f"{issuer}/token/revocation", auth=(client, f"{client}-secret-0123456789"),
                        data={"token": access_token, "token_type_hint": "access_token"})
    return {"status": answer.status_code}


async def sdk(url, user):
    from mcp import Client
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

    class Memory:
        tokens = client_info = None

        async def get_tokens(self):
            return self.tokens

        async def set_tokens(self, tokens):
            self.tokens = tokens

        async def get_client_info(self):
            return self.client_info

        async def set_client_info(self, info):
            self.client_info = info

    seen = {}

    async def redirect(auth_url):
        seen["authorization_url"] = auth_url
        seen["back"] = await asyncio.to_thread(login, auth_url, user)

    async def callback():
        query = parse_qs(urlparse(seen["back"]).query)
        return AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0],
                                       iss=query.get("iss", [None])[0])

    storage = Memory()
    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(client_name="toolhost tests", redirect_uris=[REDIRECT],
                                            grant_types=["authorization_code", "refresh_token"],
                                            response_types=["code"], scope="mcp",
                                            token_endpoint_auth_method="client_secret_basic"),
        storage=storage,
        redirect_handler=redirect,
        callback_handler=callback,
    )
    async with httpx.AsyncClient(auth=provider, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="auto") as client:
            tools = await client.list_tools()
            read = await client.call_tool("read_file", {"path": "README.md"})
            text = "\n".join(c.text for c in read.content if getattr(c, "type", "") == "text")
            auth_query = parse_qs(urlparse(seen["authorization_url"]).query)
            return {
                "tools": sorted(t.name for t in tools.tools),
                "read": {"is_error": read.is_error, "text": text},
                "registered": bool(storage.client_info and storage.client_info.client_id),
                "resource": auth_query.get("resource", [None])[0],
                "pkce": auth_query.get("code_challenge_method", [None])[0],
            }


def follow(auth_url, user):
    back = login(auth_url, user)
    answer = httpx.get(back, timeout=10)
    return {"status": answer.status_code, "page": answer.text}


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "follow":
        out = follow(*args)
    elif mode == "token":
        out = token(*args)
    elif mode == "revoke":
        out = revoke(*args)
    elif mode == "sdk":
        out = asyncio.run(sdk(*args))
    else:
        raise SystemExit(__doc__)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
