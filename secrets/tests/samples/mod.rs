//! The corpus the scanner is measured against (by the tests and the bench), written for
//! them: fake secrets of every known format in the places they turn up (`.env` files,
//! YAML, JSON, shell output, stack traces, logs), and hard negatives that look like
//! secrets and are not (UUIDs, git SHAs, SHA-256 sums, base64 images, lockfile integrity
//! hashes, minified JavaScript, a shell's environment). Every sample is generated from a
//! fixed seed, so a run is the same every time.
#![allow(dead_code)]

/// A small fixed-seed generator (xorshift64*), so the corpus is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn pick(&mut self, alphabet: &str, n: usize) -> String {
        let chars: Vec<char> = alphabet.chars().collect();
        (0..n)
            .map(|_| chars[(self.next() % chars.len() as u64) as usize])
            .collect()
    }
}

const UPPER: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const LOWER: &str = "abcdefghijklmnopqrstuvwxyz";
const DIGITS: &str = "0123456789";
const HEX: &str = "0123456789abcdef";
const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// One positive sample: the text, the kind expected, and the secret it holds.
pub struct Positive {
    pub text: String,
    pub kind: &'static str,
    pub secret: String,
}

fn pem(r: &mut Rng, label: &str, lines: usize) -> String {
    let mut s = format!("-----BEGIN {label}-----\n");
    for _ in 0..lines {
        s.push_str(&r.pick(B64, 64));
        s.push('\n');
    }
    s.push_str(&r.pick(B64, 20));
    s.push_str(&format!("==\n-----END {label}-----"));
    s
}

/// The secrets of each format, fresh from `r`.
fn secret_of(kind: &'static str, r: &mut Rng) -> String {
    match kind {
        "private-key" => {
            let labels = [
                "RSA PRIVATE KEY",
                "EC PRIVATE KEY",
                "OPENSSH PRIVATE KEY",
                "PRIVATE KEY",
                "ENCRYPTED PRIVATE KEY",
                "DSA PRIVATE KEY",
                "PGP PRIVATE KEY BLOCK",
            ];
            let label = labels[(r.next() % labels.len() as u64) as usize];
            let lines = 8 + (r.next() % 20) as usize;
            pem(r, label, lines)
        }
        "aws-access-key-id" => format!("AKIA{}", r.pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)),
        "aws-secret-access-key" => r.pick(B64, 40),
        "gcp-service-account-key-id" => r.pick(HEX, 40),
        "azure-connection-string" => format!("{}==", r.pick(B64, 86)),
        "github-token" => {
            if r.next().is_multiple_of(2) {
                format!("ghp_{}", r.pick(ALNUM, 36))
            } else {
                format!("github_pat_{}_{}", r.pick(ALNUM, 22), r.pick(ALNUM, 59))
            }
        }
        "gitlab-token" => format!("glpat-{}", r.pick(ALNUM, 20)),
        "slack-token" => format!(
            "xoxb-{}-{}-{}",
            r.pick(DIGITS, 11),
            r.pick(DIGITS, 13),
            r.pick(ALNUM, 24)
        ),
        "slack-webhook" => format!(
            "T{}/B{}/{}",
            r.pick(UPPER, 8),
            r.pick(UPPER, 10),
            r.pick(ALNUM, 24)
        ),
        "stripe-key" => format!("sk_live_{}", r.pick(ALNUM, 24)),
        "npm-token" => format!("npm_{}", r.pick(ALNUM, 36)),
        "pypi-token" => format!("pypi-AgEIcHlwaS5vcmc{}", r.pick(B64URL, 70)),
        "anthropic-api-key" => format!("sk-ant-api03-{}AA", r.pick(B64URL, 93)),
        "openai-api-key" => {
            if r.next().is_multiple_of(2) {
                format!("sk-proj-{}", r.pick(B64URL, 120))
            } else {
                format!("sk-{}T3BlbkFJ{}", r.pick(ALNUM, 20), r.pick(ALNUM, 20))
            }
        }
        "huggingface-token" => format!("hf_{}", r.pick(&format!("{UPPER}{LOWER}"), 34)),
        "jwt" => format!(
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJ{}.{}",
            r.pick(B64URL, 60),
            r.pick(B64URL, 43)
        ),
        "url-password" => r.pick(ALNUM, 14),
        "password-assignment" => format!("{}!{}", r.pick(ALNUM, 9), r.pick(DIGITS, 3)),
        "secret-assignment" => r.pick(HEX, 32),
        "bearer-token" => r.pick(B64URL, 40),
        other => panic!("no generator for {other}"),
    }
}

/// Where each kind turns up: the secret placed in a few realistic surroundings.
fn placed(kind: &'static str, s: &str, variant: usize) -> String {
    let v = variant % 3;
    match (kind, v) {
        ("private-key", 0) => format!("$ cat ~/.ssh/id_rsa\n{s}\n$ "),
        ("private-key", 1) => format!(
            "{{\"type\": \"service_account\", \"private_key\": \"{}\\n\", \"client_email\": \"x@y.iam.gserviceaccount.com\"}}",
            s.replace('\n', "\\n")
        ),
        ("private-key", _) => format!("tls:\n  key: |\n{}\n", indent(s, "    ")),
        ("aws-access-key-id", 0) => format!("AWS_ACCESS_KEY_ID={s}\nAWS_REGION=eu-west-1\n"),
        ("aws-access-key-id", 1) => format!("[default]\naws_access_key_id = {s}\n"),
        ("aws-access-key-id", _) => {
            format!("{{\"AccessKey\": {{\"AccessKeyId\": \"{s}\", \"Status\": \"Active\"}}}}")
        }
        ("aws-secret-access-key", 0) => format!("export AWS_SECRET_ACCESS_KEY={s}\n"),
        ("aws-secret-access-key", 1) => {
            format!(
                "[default]\naws_access_key_id = AKIA2E0A8F3B244C9986\naws_secret_access_key = {s}\n"
            )
        }
        ("aws-secret-access-key", _) => format!(
            "{{\n  \"AccessKey\": {{\n    \"UserName\": \"ci\",\n    \"SecretAccessKey\": \"{s}\"\n  }}\n}}"
        ),
        ("gcp-service-account-key-id", _) => format!(
            "{{\n  \"type\": \"service_account\",\n  \"project_id\": \"demo-{variant}\",\n  \"private_key_id\": \"{s}\",\n  \"client_id\": \"1234567890\"\n}}"
        ),
        ("azure-connection-string", 0) => format!(
            "AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=demo{variant};AccountKey={s};EndpointSuffix=core.windows.net\n"
        ),
        ("azure-connection-string", _) => format!(
            "\"ConnectionStrings\": {{ \"Storage\": \"DefaultEndpointsProtocol=https;AccountName=app;AccountKey={s}\" }}"
        ),
        ("slack-webhook", _) => format!(
            "curl -X POST -H 'Content-type: application/json' --data '{{\"text\":\"hi\"}}' https://hooks.slack.com/services/{s}\n"
        ),
        ("url-password", 0) => format!("DATABASE_URL=postgres://app:{s}@db.internal:5432/app\n"),
        ("url-password", 1) => format!(
            "Traceback (most recent call last):\n  File \"app.py\", line 12, in <module>\nConnectionError: could not reach redis://default:{s}@cache:6379/0\n"
        ),
        ("url-password", _) => {
            format!("$ git remote -v\norigin\thttps://ci-bot:{s}@github.com/acme/app.git (fetch)\n")
        }
        ("password-assignment", 0) => format!("DB_PASSWORD={s}\nDB_USER=app\n"),
        ("password-assignment", 1) => format!("database:\n  user: app\n  password: \"{s}\"\n"),
        ("password-assignment", _) => {
            format!("{{\"smtp\": {{\"host\": \"mail\", \"password\": \"{s}\"}}}}")
        }
        ("secret-assignment", 0) => format!("SESSION_SECRET={s}\n"),
        ("secret-assignment", 1) => format!("api:\n  api_key: {s}\n"),
        ("secret-assignment", _) => {
            format!("{{\"client_secret\": \"{s}\", \"redirect_uri\": \"http://localhost\"}}")
        }
        ("bearer-token", 0) => {
            format!("> GET /v1/items HTTP/1.1\n> Authorization: Bearer {s}\n> Accept: */*\n")
        }
        ("bearer-token", _) => format!("headers = {{'Authorization': 'Bearer {s}'}}\n"),
        (_, 0) => format!("TOKEN={s}\n"),
        (_, 1) => format!("config:\n  credentials:\n    value: {s}\n"),
        (_, _) => format!(
            "Error: request failed with 401\n    at call (/app/client.js:41:11)\n  token used: \"{s}\"\n"
        ),
    }
}

fn indent(s: &str, by: &str) -> String {
    s.lines()
        .map(|l| format!("{by}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

const KINDS: [&str; 21] = [
    "private-key",
    "aws-access-key-id",
    "aws-secret-access-key",
    "gcp-service-account-key-id",
    "azure-connection-string",
    "github-token",
    "gitlab-token",
    "slack-token",
    "slack-webhook",
    "stripe-key",
    "npm-token",
    "pypi-token",
    "anthropic-api-key",
    "openai-api-key",
    "huggingface-token",
    "jwt",
    "url-password",
    "password-assignment",
    "secret-assignment",
    "bearer-token",
    "private-key",
];

pub fn positives() -> Vec<Positive> {
    let mut r = Rng(0x5EC2_E7C0_FFEE_0001);
    let mut out = Vec::new();
    for (i, kind) in KINDS.iter().enumerate() {
        for variant in 0..6 {
            let secret = secret_of(kind, &mut r);
            out.push(Positive {
                text: placed(kind, &secret, variant + i),
                kind,
                secret,
            });
        }
    }
    out
}

pub fn negatives() -> Vec<(&'static str, String)> {
    let mut r = Rng(0x0E6A_71FE_0000_0002);
    let mut out = Vec::new();
    for i in 0..12 {
        let uuid = format!(
            "{}-{}-4{}-a{}-{}",
            r.pick(HEX, 8),
            r.pick(HEX, 4),
            r.pick(HEX, 3),
            r.pick(HEX, 3),
            r.pick(HEX, 12)
        );
        out.push((
            "uuid",
            format!("{{\"id\": \"{uuid}\", \"request_id\": \"{uuid}\", \"n\": {i}}}"),
        ));
        let sha = r.pick(HEX, 40);
        out.push((
            "git sha",
            format!(
                "commit {sha}\nAuthor: Dev <dev@example.com>\n\n    fix: token refresh ({})\n",
                &sha[..7]
            ),
        ));
        out.push((
            "sha256sum",
            format!(
                "{}  target/release/toolhost\n{}  Cargo.lock\n",
                r.pick(HEX, 64),
                r.pick(HEX, 64)
            ),
        ));
        out.push((
            "base64 image",
            format!(
                "<img src=\"data:image/png;base64,iVBORw0KGgo{}\">",
                r.pick(B64, 600)
            ),
        ));
        out.push((
            "npm integrity",
            format!(
                "\"node_modules/left-pad\": {{\n  \"version\": \"1.3.0\",\n  \"resolved\": \"https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz\",\n  \"integrity\": \"sha512-{}==\"\n}}",
                r.pick(B64, 86)
            ),
        ));
        out.push((
            "cargo checksum",
            format!(
                "[[package]]\nname = \"serde\"\nversion = \"1.0.{i}\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"{}\"\n",
                r.pick(HEX, 64)
            ),
        ));
        out.push(("minified js", minified(&mut r)));
        out.push((
            "placeholders",
            [
                "password: ${DB_PASSWORD}",
                "api_key: <your-api-key>",
                "Authorization: Bearer ${TOKEN}",
                "secret_key_base: <%= ENV[\"SECRET_KEY_BASE\"] %>",
                "DB_PASSWORD=",
                "\"token_count\": 1234, \"max_tokens\": 4096",
                "\"auth\": \"none\", \"auth_type\": \"oauth2\"",
                "postgres://localhost:5432/app",
                "see https://docs.example.com:8443/api/auth/token for details",
                "token = tokenizer.encode(text)",
                "let password_hash = argon2::hash(password, &salt)?;",
                "keys: [\"AKIA\", \"ghp_\"] are prefixes, not keys",
            ][i]
                .to_string(),
        ));
        out.push((
            "shell environment",
            [
                "PWD=/home/dev/projects/app-with-a-long-name",
                "OLDPWD=/tmp/build-cache-0123456789abcdef",
                "SSH_AUTH_SOCK=/tmp/ssh-XXXXabcdEFGH/agent.1234",
                "XDG_SESSION_ID=c2f9a8b7e6d5c4b3a291",
                "GPG_AGENT_INFO=/run/user/1000/gnupg/S.gpg-agent:0:1",
                "HISTFILE=/home/dev/.bash_history",
                "LS_COLORS=rs=0:di=01;34:ln=01;36:mh=00:pi=40;33",
                "TERM_SESSION_ID=w0t0p0:8F3B2A1C-4D5E-6F70-8192-A3B4C5D6E7F8",
                "KUBECONFIG=/home/dev/.kube/config",
                "npm_config_cache=/home/dev/.npm",
                "npm_package_version=1.2.3",
                "AUTHOR=Jane Doe <jane@example.com>",
            ][i]
                .to_string(),
        ));
        out.push((
            "hex beside a plain key",
            format!(
                "{{\"etag\": \"{}\", \"hash\": \"{}\"}}",
                r.pick(HEX, 32),
                r.pick(HEX, 64)
            ),
        ));
    }
    out
}

fn minified(r: &mut Rng) -> String {
    let mut s = String::from("!function(e,t){\"use strict\";");
    for _ in 0..40 {
        let len = 1 + (r.next() % 3) as usize;
        let name = r.pick(LOWER, len);
        let key = ["token", "auth", "key", "secret", "pass"][(r.next() % 5) as usize];
        s.push_str(&format!(
            "var {name}=e.{key}||t.get(\"{key}\"),{name}{}=function(n){{return n&&n.{key}Id?{}:null}};",
            r.pick(DIGITS, 1),
            r.pick(DIGITS, 3)
        ));
    }
    s.push_str("}(window,document);");
    s
}
