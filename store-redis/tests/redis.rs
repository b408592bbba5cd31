//! The Redis store against a real `redis-server`: what the in-memory store does, across
//! two stores (two instances), and through the server going down and coming back.
#![cfg(test)]

use std::sync::Arc;
use std::time::Duration;

use dispatcher_core::store::{Bus, Claims, Counters, Generations, Records, Sets, Store};
use store_redis::RedisStore;
use toolhost_tests::redis_server::RedisServer;

const LONG: Duration = Duration::from_secs(60);

fn pair(server: &RedisServer) -> (Arc<RedisStore>, Arc<RedisStore>) {
    (
        RedisStore::open(&server.url()).unwrap(),
        RedisStore::open(&server.url()).unwrap(),
    )
}

#[tokio::test]
async fn a_key_claimed_by_one_instance_is_taken_for_the_other() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = pair(&server);
    assert!(a.claim("nonce:1", LONG).await.unwrap());
    assert!(!b.claim("nonce:1", LONG).await.unwrap());
    assert!(b.claim("nonce:2", Duration::from_millis(50)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert!(a.claim("nonce:2", LONG).await.unwrap());
}

#[tokio::test]
async fn every_instance_sees_one_generation_until_the_data_is_lost() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let (a, b) = pair(&server);
    let (first, seen) = tokio::join!(a.generation(), b.generation());
    let first = first.unwrap();
    assert_eq!(seen.unwrap(), first);
    assert_eq!(a.generation().await.unwrap(), first, "it changed unasked");
    server.flush_all();
    let after_flush = b.generation().await.unwrap();
    assert_ne!(after_flush, first);
    assert_eq!(a.generation().await.unwrap(), after_flush);
    server.restart();
    // The first command after a restart may meet the old connection, broken.
    let mut after_restart = a.generation().await;
    for _ in 0..20 {
        if after_restart.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        after_restart = a.generation().await;
    }
    let after_restart = after_restart.unwrap();
    assert_ne!(after_restart, after_flush);
    assert_eq!(b.generation().await.unwrap(), after_restart);
}

#[tokio::test]
async fn of_many_concurrent_claims_exactly_one_wins() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let stores: Vec<Arc<RedisStore>> = (0..3)
        .map(|_| RedisStore::open(&server.url()).unwrap())
        .collect();
    let mut claims = tokio::task::JoinSet::new();
    for i in 0..30 {
        let store = stores[i % 3].clone();
        claims.spawn(async move { store.claim("nonce:race", LONG).await.unwrap() });
    }
    let won = claims.join_all().await.into_iter().filter(|w| *w).count();
    assert_eq!(won, 1);
}

#[tokio::test]
async fn sets_counters_and_records_are_shared() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = pair(&server);
    a.add("grants:s", "shell", LONG).await.unwrap();
    assert!(b.contains("grants:s", "shell").await.unwrap());
    assert!(b.remove("grants:s", "shell").await.unwrap());
    assert!(!a.contains("grants:s", "shell").await.unwrap());
    let window = Duration::from_millis(200);
    assert_eq!(a.hit("calls:alice", window).await.unwrap(), 1);
    assert_eq!(b.hit("calls:alice", window).await.unwrap(), 2);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(a.hit("calls:alice", window).await.unwrap(), 1);
    a.put("pending:1", r#"{"x":1}"#, LONG).await.unwrap();
    a.put("pending:2", r#"{"x":2}"#, LONG).await.unwrap();
    a.put("pendingx:3", "no", LONG).await.unwrap();
    assert_eq!(
        b.get("pending:1").await.unwrap().as_deref(),
        Some(r#"{"x":1}"#)
    );
    let listed: Vec<String> = b
        .scan("pending:")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(listed, ["pending:1", "pending:2"]);
    assert!(b.delete("pending:1").await.unwrap());
    assert_eq!(a.get("pending:1").await.unwrap(), None);
}

#[tokio::test]
async fn a_message_published_by_one_instance_reaches_the_others() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = pair(&server);
    let mut heard = b.subscribe("answers");
    // The subscription reaches the server in the background: publish until it is heard.
    let got = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            a.publish("answers", "first wins").await.unwrap();
            if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(100), heard.recv()).await
            {
                return m;
            }
        }
    })
    .await
    .expect("the message arrived");
    assert_eq!(&*got, "first wins");
}

#[tokio::test]
async fn when_redis_is_down_operations_fail_at_once_and_work_again_when_it_is_back() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let store = RedisStore::open(&server.url()).unwrap();
    let mut heard = store.subscribe("events");
    store.check().await.unwrap();
    assert!(store.health().up);
    server.stop();
    let started = std::time::Instant::now();
    let error = store.claim("nonce:down", LONG).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(error.to_string().contains("cannot be reached"), "{error}");
    assert!(error.to_string().contains(&server.url()), "{error}");
    let health = store.health();
    assert!(!health.up && health.detail.is_some(), "{health:?}");
    server.restart();
    // Back by itself: the next operations reconnect.
    let recovered = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if store.claim("nonce:back", LONG).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(recovered.is_ok(), "no recovery: {:?}", store.health());
    assert!(store.health().up);
    // And its channel is subscribed again.
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let _ = store.publish("events", "after the restart").await;
            if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(100), heard.recv()).await
            {
                return m;
            }
        }
    })
    .await
    .expect("the channel works again");
    assert_eq!(&*got, "after the restart");
}

#[tokio::test]
async fn a_store_opened_while_redis_is_down_works_once_it_is_up() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    server.stop();
    let store = RedisStore::open(&server.url()).unwrap();
    assert!(store.check().await.is_err());
    server.restart();
    let up = tokio::time::timeout(Duration::from_secs(10), async {
        while store.check().await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(up.is_ok());
}

#[test]
fn a_url_that_is_not_redis_is_refused_saying_what_to_write() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _entered = runtime.enter();
    let Err(e) = RedisStore::open("postgres://db") else {
        panic!("accepted")
    };
    assert!(e.to_string().contains("redis://HOST:PORT/DB"), "{e}");
}
