//! The controller's REST client against a plain `http://` API server, as behind `kubectl
//! proxy`: HTTP/1.1, connections kept alive and shared by the requests in flight, and a
//! connection the server drops survived.
//!
//! `cargo test -p cubepod-tests --test rest_http1`

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cubepod_kube::rest::{ConnectionConfig, RestCluster, RestOptions};
use cubepod_kube::{Cluster, Resource};
use cubepod_tests::apiserver::{FakeApiServer, FakeOptions, FaultAction, FaultRule};
use hyper::{Method, Version};
use serde_json::{Value, json};

/// A TCP relay in front of `to` that counts the connections opened through it.
async fn counting_relay(to: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("relay binds");
    let addr = listener.local_addr().expect("relay address");
    let opened = Arc::new(AtomicUsize::new(0));
    let counted = opened.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (addr, opened)
}

fn secret(name: String) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
           "metadata": {"name": name, "namespace": "ns"}})
}

/// Creates `count` Secrets named `prefix-<i>`, `in_flight` at a time.
async fn create(cluster: &Arc<RestCluster>, prefix: &str, count: usize, in_flight: usize) {
    for chunk in (0..count).collect::<Vec<_>>().chunks(in_flight) {
        let mut calls = tokio::task::JoinSet::new();
        for i in chunk {
            let (cluster, name) = (cluster.clone(), format!("{prefix}-{i}"));
            calls.spawn(async move { cluster.create(Resource::Secret, "ns", secret(name)).await });
        }
        while let Some(done) = calls.join_next().await {
            done.expect("task").expect("created");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_plain_http_requests_share_kept_alive_connections_and_survive_a_dropped_one() {
    let mut namespaces = FakeOptions::default().namespaces;
    namespaces.push("ns".into());
    let fake = FakeApiServer::start(FakeOptions {
        tls: false,
        namespaces,
        ..FakeOptions::default()
    })
    .expect("fake starts");
    let (relay, opened) = counting_relay(fake.addr()).await;
    let cluster = RestCluster::new(
        ConnectionConfig::new(&format!("http://{relay}")).expect("an http:// server"),
        RestOptions::default(),
    )
    .expect("client");

    // One request after another: one connection, kept alive.
    create(&cluster, "one", 20, 1).await;
    assert_eq!(opened.load(Ordering::SeqCst), 1);
    let requests = fake.requests();
    assert_eq!(requests.len(), 20);
    assert!(requests.iter().all(|r| r.version == Version::HTTP_11));

    // Eight in flight: a connection each at most, and the same ones again for the next.
    create(&cluster, "eight", 8, 8).await;
    let after_first = opened.load(Ordering::SeqCst);
    assert!(after_first <= 9, "{after_first} connections for 8 requests");
    create(&cluster, "again", 40, 8).await;
    let after_more = opened.load(Ordering::SeqCst);
    assert!(
        after_more <= after_first + 2,
        "{after_more} connections after 40 more requests (were {after_first})"
    );

    // The server drops a request's connection without an answer: the request is sent again,
    // on a new connection, and the client goes on.
    fake.faults().add(
        FaultRule::new(FaultAction::Reset)
            .method(Method::POST)
            .times(1),
    );
    create(&cluster, "dropped", 1, 1).await;
    assert_eq!(fake.faults().fired(), 1);
    let got = cluster
        .get(Resource::Secret, "ns", "dropped-0")
        .await
        .expect("read back");
    assert_eq!(got["metadata"]["name"], "dropped-0");
    create(&cluster, "after", 5, 1).await;
    assert_eq!(fake.cluster().count(Resource::Secret), 20 + 8 + 40 + 1 + 5);
}
