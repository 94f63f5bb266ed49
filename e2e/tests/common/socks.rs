//! SOCKS5 in the tests: Debian's microsocks (a real SOCKS5 server, which
//! binds its outgoing connections to an address of the test's choosing),
//! a TCP front that records the address each connection comes from (what a
//! node or PIR server would see), and a SOCKS5 server that records the
//! credentials each connection carried and whether it carried a send (what
//! Tor's circuit isolation keys on).

use std::net::IpAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A TCP front of `target` that records the peer address of every
/// connection it accepts.
pub async fn recording_front(target: String) -> (String, Arc<Mutex<Vec<IpAddr>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let peers = Arc::new(Mutex::new(Vec::new()));
    let seen = peers.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut inbound, peer)) = listener.accept().await else {
                return;
            };
            seen.lock().unwrap().push(peer.ip());
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(&target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (format!("http://{addr}"), peers)
}

/// microsocks on a free loopback port, its outgoing connections bound to
/// `bind`, asking `credentials` when given; killed when dropped. Returns it
/// and its port once it listens.
pub async fn start_microsocks(
    bind: &str,
    credentials: Option<(&str, &str)>,
) -> (tokio::process::Child, u16) {
    let port = test_support::free_port();
    let mut args = vec![
        "-i".to_string(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
    ];
    args.extend(["-b".to_string(), bind.to_string()]);
    if let Some((user, password)) = credentials {
        args.extend(["-u".to_string(), user.into(), "-P".into(), password.into()]);
    }
    let child = tokio::process::Command::new("microsocks")
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("microsocks (installed by scripts/install-test-deps.sh)");
    let listening = || async { TcpStream::connect(("127.0.0.1", port)).await.ok() };
    test_support::eventually("microsocks listens", listening).await;
    (child, port)
}

/// One connection through [`start_credential_recording_socks`]: the
/// username it authenticated with, and the JSON-RPC methods its bytes
/// carried to the target.
#[derive(Clone, Debug, Default)]
pub struct SocksConnection {
    pub username: String,
    pub sent: Vec<u8>,
}

impl SocksConnection {
    pub fn carried(&self, method: &str) -> bool {
        let needle = format!("\"method\":\"{method}\"");
        self.sent
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    }
}

pub type SocksLog = Arc<Mutex<Vec<Arc<Mutex<SocksConnection>>>>>;

/// A SOCKS5 server on a free loopback port that takes any username and
/// password (as Tor does) and connects where asked (an IPv4 address or a
/// name, resolved here), recording each connection's username and what
/// the client sent through it.
pub async fn start_credential_recording_socks() -> (u16, SocksLog) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let log: SocksLog = Arc::default();
    let connections = log.clone();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let record = Arc::new(Mutex::new(SocksConnection::default()));
            connections.lock().unwrap().push(record.clone());
            tokio::spawn(async move {
                let _ = socks_session(inbound, record).await;
            });
        }
    });
    (port, log)
}

async fn socks_session(
    mut inbound: TcpStream,
    record: Arc<Mutex<SocksConnection>>,
) -> std::io::Result<()> {
    // Greeting: the client must offer username/password (method 2).
    let mut head = [0u8; 2];
    inbound.read_exact(&mut head).await?;
    let mut methods = vec![0u8; head[1] as usize];
    inbound.read_exact(&mut methods).await?;
    if !methods.contains(&2) {
        inbound.write_all(&[5, 0xff]).await?;
        return Ok(());
    }
    inbound.write_all(&[5, 2]).await?;
    // RFC 1929: version, username, password.
    let mut version_and_len = [0u8; 2];
    inbound.read_exact(&mut version_and_len).await?;
    let mut user = vec![0u8; version_and_len[1] as usize];
    inbound.read_exact(&mut user).await?;
    let mut password = vec![0u8; inbound.read_u8().await? as usize];
    inbound.read_exact(&mut password).await?;
    record.lock().unwrap().username = String::from_utf8_lossy(&user).into_owned();
    inbound.write_all(&[1, 0]).await?;
    let target = connect_request(&mut inbound).await?;
    let mut outbound = TcpStream::connect(target).await?;
    inbound.write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
    relay_recording(inbound, outbound.split(), record).await
}

/// The target of a CONNECT request (IPv4 or a domain name).
async fn connect_request(inbound: &mut TcpStream) -> std::io::Result<String> {
    let mut request = [0u8; 4];
    inbound.read_exact(&mut request).await?;
    let host = match request[3] {
        1 => {
            let mut ip = [0u8; 4];
            inbound.read_exact(&mut ip).await?;
            std::net::Ipv4Addr::from(ip).to_string()
        }
        3 => {
            let mut name = vec![0u8; inbound.read_u8().await? as usize];
            inbound.read_exact(&mut name).await?;
            String::from_utf8_lossy(&name).into_owned()
        }
        _ => return Err(std::io::Error::other("only IPv4 and names here")),
    };
    let port = inbound.read_u16().await?;
    Ok(format!("{host}:{port}"))
}

async fn relay_recording(
    inbound: TcpStream,
    (mut from_target, mut to_target): (
        tokio::net::tcp::ReadHalf<'_>,
        tokio::net::tcp::WriteHalf<'_>,
    ),
    record: Arc<Mutex<SocksConnection>>,
) -> std::io::Result<()> {
    let (mut from_client, mut to_client) = inbound.into_split();
    let upward = async {
        let mut buf = vec![0u8; 16 << 10];
        loop {
            let n = from_client.read(&mut buf).await?;
            if n == 0 {
                return to_target.shutdown().await;
            }
            record.lock().unwrap().sent.extend_from_slice(&buf[..n]);
            to_target.write_all(&buf[..n]).await?;
        }
    };
    let downward = tokio::io::copy(&mut from_target, &mut to_client);
    let (up, down) = tokio::join!(upward, downward);
    up.and(down.map(|_| ()))
}
