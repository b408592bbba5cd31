//! A WebDriver session of headless Chromium (the console's browser tests).

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::raw_http::request;

/// A WebDriver session of headless Chromium, through chromedriver.
pub struct Browser {
    driver: Child,
    addr: String,
    session: String,
    /// Chromium's profile, removed after the browser is gone.
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = request(
            &self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            &[],
            b"",
        );
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Browser {
    /// Chromium and chromedriver from the distribution's packages (`cargo xtask test`
    /// installs them); `None` when they are missing and the run does not require them.
    pub fn start() -> Option<Browser> {
        let driver_path = std::env::var("TOOLHOST_TEST_CHROMEDRIVER")
            .unwrap_or_else(|_| "/usr/bin/chromedriver".into());
        let chromium =
            std::env::var("TOOLHOST_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        if !Path::new(&driver_path).exists() || !Path::new(&chromium).exists() {
            assert!(
                std::env::var_os("TOOLHOST_TEST_REQUIRE_PEERS").is_none(),
                "Chromium or chromedriver is missing ({chromium}, {driver_path}): apt-get install chromium chromium-driver"
            );
            eprintln!("skipped: no Chromium/chromedriver here (cargo xtask test installs them)");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(&driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": chromium,
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--window-size=1200,700", format!("--user-data-dir={}", profile.path().display())]
        }}}});
        let r = request(
            &addr,
            "POST",
            "/session",
            &[("Content-Type", "application/json")],
            caps.to_string().as_bytes(),
        );
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let session = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"))
            .to_string();
        Some(Browser {
            driver,
            addr,
            session,
            _profile: profile,
        })
    }

    pub fn command(&self, method: &str, path: &str, body: Value) -> Value {
        let r = request(
            &self.addr,
            method,
            &format!("/session/{}{path}", self.session),
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        );
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        v["value"].clone()
    }

    pub fn open(&self, url: &str) {
        self.command("POST", "/url", json!({"url": url}));
    }

    /// The first element matching `css`, waiting up to 20 s for one.
    pub fn wait_for(&self, css: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let v = self.command(
                "POST",
                "/element",
                json!({"using": "css selector", "value": css}),
            );
            if let Some(id) = v
                .as_object()
                .and_then(|o| o.values().next())
                .and_then(Value::as_str)
                && v.get("error").is_none()
            {
                return id.to_string();
            }
            assert!(Instant::now() < deadline, "no element {css} on the page");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// How many elements match `css` now.
    pub fn count(&self, css: &str) -> usize {
        self.command(
            "POST",
            "/elements",
            json!({"using": "css selector", "value": css}),
        )
        .as_array()
        .map_or(0, Vec::len)
    }

    pub fn type_into(&self, element: &str, text: &str) {
        self.command(
            "POST",
            &format!("/element/{element}/value"),
            json!({"text": text}),
        );
    }

    /// Clicks the first element matching `css`, waiting up to 20 s for one that takes the
    /// click: a page that redraws between finding and clicking (the console's pending list
    /// refreshes on every event) leaves a stale element, which is found again. Any other
    /// refusal of the click fails the test with WebDriver's words.
    pub fn click(&self, css: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let Err(refusal) = self.try_click(&self.wait_for(css)) else {
                return;
            };
            let again = matches!(
                refusal["error"].as_str(),
                Some(
                    "stale element reference"
                        | "element click intercepted"
                        | "element not interactable"
                )
            );
            assert!(
                again && Instant::now() < deadline,
                "the click on {css} was refused: {refusal}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Clicks an element found before; WebDriver's refusal (a stale element is one) as is.
    pub fn try_click(&self, element: &str) -> Result<(), Value> {
        let v = self.command("POST", &format!("/element/{element}/click"), json!({}));
        match v.get("error") {
            Some(_) => Err(v),
            None => Ok(()),
        }
    }

    pub fn text(&self, element: &str) -> String {
        self.command("GET", &format!("/element/{element}/text"), json!({}))
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let v = self.command("GET", "/screenshot", json!({}));
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap()
    }
}
