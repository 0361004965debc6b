//! Discovery: where a starting node finds nodes of its cluster to join
//! through. One trait, [`Discovery`], with a static list
//! ([`StaticSeeds`]), DNS (`DnsSeeds`, feature `dns`: A/AAAA or SRV
//! records, as a Kubernetes headless Service or Consul publish them) and
//! the Kubernetes API (`KubernetesSeeds`, feature `kubernetes`: running
//! pods by label selector). A user's own source (a cloud provider's API, a
//! file) implements the trait.
//!
//! Discovery only finds addresses: the node connects to each (mutual TLS
//! as always) and announces itself to whoever answers; membership does the
//! rest. [`ClusterBuilder::discovery`](crate::ClusterBuilder::discovery)
//! asks at start and again every few seconds for as long as the node sees
//! no other member, so nodes started at once (a StatefulSet with parallel
//! pod management) find each other whichever starts first.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_remote::NodeLookup;

use crate::membership::Membership;

/// The addresses a [`Discovery`] found.
pub type SeedsFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<SocketAddr>, DiscoveryError>> + Send + 'a>>;

/// A source of the addresses nodes of the cluster listen at.
///
/// ```
/// use std::net::SocketAddr;
/// use troubadour_cluster::discovery::{Discovery, DiscoveryError, SeedsFuture};
///
/// /// Seeds from a file an orchestrator writes, one address per line.
/// struct SeedFile(std::path::PathBuf);
///
/// impl Discovery for SeedFile {
///     fn seeds(&self) -> SeedsFuture<'_> {
///         Box::pin(async move {
///             let text = std::fs::read_to_string(&self.0)
///                 .map_err(|e| DiscoveryError::Other(format!("{}: {e}", self.0.display())))?;
///             text.lines()
///                 .filter(|l| !l.trim().is_empty())
///                 .map(|l| l.trim().parse::<SocketAddr>())
///                 .collect::<Result<_, _>>()
///                 .map_err(|e| DiscoveryError::Other(format!("{}: {e}", self.0.display())))
///         })
///     }
/// }
/// ```
pub trait Discovery: Send + Sync + 'static {
    /// The addresses found now. This node's own may be among them (it is
    /// skipped); an empty list is no error (nobody is up yet).
    fn seeds(&self) -> SeedsFuture<'_>;
}

/// Why discovery found nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// A DNS lookup failed.
    Dns {
        /// The name looked up.
        name: String,
        /// What the resolver said.
        reason: String,
    },
    /// The Kubernetes API refused or failed the pod list.
    Kubernetes(String),
    /// Another source failed (a user's [`Discovery`]).
    Other(String),
}

impl fmt::Display for DiscoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiscoveryError::Dns { name, reason } => write!(
                f,
                "discovery could not look up {name:?} in DNS ({reason}): check the name (a \
                 headless Service's name for Kubernetes) and that this host's resolver serves it"
            ),
            DiscoveryError::Kubernetes(reason) => write!(
                f,
                "discovery could not list the cluster's pods ({reason}): check the namespace, \
                 the label selector and that the pod's service account may list pods there"
            ),
            DiscoveryError::Other(reason) => write!(f, "discovery failed: {reason}"),
        }
    }
}

impl std::error::Error for DiscoveryError {}

/// A fixed list of addresses (configuration, command-line flags).
#[derive(Clone, Debug)]
pub struct StaticSeeds(Vec<SocketAddr>);

impl StaticSeeds {
    /// These addresses.
    pub fn new(addrs: impl IntoIterator<Item = SocketAddr>) -> StaticSeeds {
        StaticSeeds(addrs.into_iter().collect())
    }
}

impl Discovery for StaticSeeds {
    fn seeds(&self) -> SeedsFuture<'_> {
        Box::pin(std::future::ready(Ok(self.0.clone())))
    }
}

/// Runs `work` on the runtime a source was made in, so whoever polls it
/// needs no runtime of its own (an actor's handler); in place without one.
/// `failed` words a task that did not finish.
#[cfg(any(feature = "dns", feature = "kubernetes"))]
fn on_runtime<'a>(
    runtime: Option<&tokio::runtime::Handle>,
    work: impl Future<Output = Result<Vec<SocketAddr>, DiscoveryError>> + Send + 'static,
    failed: impl FnOnce(String) -> DiscoveryError + Send + 'static,
) -> SeedsFuture<'a> {
    match runtime {
        Some(runtime) => {
            let task = runtime.spawn(work);
            Box::pin(async move {
                task.await
                    .map_err(|e| failed(format!("the discovery task failed: {e}")))?
            })
        }
        None => Box::pin(work),
    }
}

#[cfg(feature = "dns")]
pub use dns::DnsSeeds;

#[cfg(feature = "dns")]
mod dns {
    use super::{Discovery, DiscoveryError, SeedsFuture};
    use hickory_resolver::config::{NameServerConfig, ResolverConfig};
    use hickory_resolver::net::runtime::TokioRuntimeProvider;
    use hickory_resolver::proto::rr::RData;
    use hickory_resolver::TokioResolver;
    use std::net::SocketAddr;

    /// Seeds from DNS: every A and AAAA address of a name at a port, or
    /// the targets and ports of its SRV records.
    ///
    /// ```no_run
    /// use troubadour_cluster::discovery::DnsSeeds;
    /// # fn main() -> Result<(), troubadour_cluster::discovery::DiscoveryError> {
    /// // A Kubernetes headless Service: one A record per ready pod.
    /// let by_address = DnsSeeds::addresses("vehicles.prod.svc.cluster.local", 7100)?;
    /// // Its SRV records carry the port of the named port `cluster`.
    /// let by_srv = DnsSeeds::srv("_cluster._tcp.vehicles.prod.svc.cluster.local")?;
    /// # Ok(()) }
    /// ```
    #[derive(Clone)]
    pub struct DnsSeeds {
        resolver: TokioResolver,
        name: String,
        /// `Some(port)`: A/AAAA records at `port`; `None`: SRV records.
        port: Option<u16>,
        runtime: Option<tokio::runtime::Handle>,
    }

    impl DnsSeeds {
        /// Every A and AAAA address of `name`, at `port`, through this
        /// host's resolver (`/etc/resolv.conf`).
        pub fn addresses(name: impl Into<String>, port: u16) -> Result<DnsSeeds, DiscoveryError> {
            DnsSeeds::system(name.into(), Some(port))
        }

        /// The SRV records of `name`: each target's addresses at the
        /// record's port, through this host's resolver.
        pub fn srv(name: impl Into<String>) -> Result<DnsSeeds, DiscoveryError> {
            DnsSeeds::system(name.into(), None)
        }

        fn system(name: String, port: Option<u16>) -> Result<DnsSeeds, DiscoveryError> {
            let resolver = TokioResolver::builder_tokio()
                .and_then(|b| b.build())
                .map_err(|e| DiscoveryError::Dns {
                    name: name.clone(),
                    reason: format!("this host's resolver configuration: {e}"),
                })?;
            Ok(DnsSeeds::with(resolver, name, port))
        }

        fn with(resolver: TokioResolver, name: String, port: Option<u16>) -> DnsSeeds {
            DnsSeeds {
                resolver,
                name,
                port,
                runtime: tokio::runtime::Handle::try_current().ok(),
            }
        }

        /// The same lookups through the name server at `server` instead
        /// of this host's (UDP and TCP).
        pub fn through(self, server: SocketAddr) -> Result<DnsSeeds, DiscoveryError> {
            let mut ns = NameServerConfig::udp_and_tcp(server.ip());
            for c in &mut ns.connections {
                c.port = server.port();
            }
            let config = ResolverConfig::from_parts(None, Vec::new(), vec![ns]);
            let resolver =
                TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
                    .build()
                    .map_err(|e| DiscoveryError::Dns {
                        name: self.name.clone(),
                        reason: format!("name server {server}: {e}"),
                    })?;
            Ok(DnsSeeds::with(resolver, self.name, self.port))
        }

        async fn lookup(
            resolver: TokioResolver,
            name: String,
            port: Option<u16>,
        ) -> Result<Vec<SocketAddr>, DiscoveryError> {
            let failed = |e: &dyn std::fmt::Display| DiscoveryError::Dns {
                name: name.clone(),
                reason: e.to_string(),
            };
            if let Some(port) = port {
                let found = resolver
                    .lookup_ip(name.as_str())
                    .await
                    .map_err(|e| failed(&e))?;
                return Ok(found.iter().map(|ip| SocketAddr::new(ip, port)).collect());
            }
            let found = resolver
                .srv_lookup(name.as_str())
                .await
                .map_err(|e| failed(&e))?;
            let mut targets: Vec<(u16, u16, String)> = found
                .answers()
                .iter()
                .filter_map(|r| match &r.data {
                    RData::SRV(srv) => Some((srv.priority, srv.port, srv.target.to_string())),
                    _ => None,
                })
                .collect();
            // The most preferred first: a node tries seeds in order.
            targets.sort();
            let mut addrs = Vec::new();
            for (_, port, target) in targets {
                let ips = resolver
                    .lookup_ip(target.as_str())
                    .await
                    .map_err(|e| failed(&format!("target {target}: {e}")))?;
                addrs.extend(ips.iter().map(|ip| SocketAddr::new(ip, port)));
            }
            Ok(addrs)
        }
    }

    impl Discovery for DnsSeeds {
        fn seeds(&self) -> SeedsFuture<'_> {
            let work = DnsSeeds::lookup(self.resolver.clone(), self.name.clone(), self.port);
            let name = self.name.clone();
            super::on_runtime(self.runtime.as_ref(), work, move |reason| {
                DiscoveryError::Dns { name, reason }
            })
        }
    }

    impl std::fmt::Debug for DnsSeeds {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("DnsSeeds")
                .field("name", &self.name)
                .field("port", &self.port)
                .finish_non_exhaustive()
        }
    }
}

#[cfg(feature = "kubernetes")]
pub use kubernetes::KubernetesSeeds;

#[cfg(feature = "kubernetes")]
mod kubernetes {
    use super::{Discovery, DiscoveryError, SeedsFuture};
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, ListParams};
    use std::net::{IpAddr, SocketAddr};

    /// Seeds from the Kubernetes API: the running pods of a namespace
    /// whose labels match a selector, each at the cluster's port. Pods are
    /// taken once running, not once ready (a node's readiness waits for
    /// its shards, which wait for the cluster it is joining). The pod's
    /// service account needs `list` on `pods` in the namespace.
    ///
    /// ```no_run
    /// use troubadour_cluster::discovery::KubernetesSeeds;
    /// # async fn f() -> Result<(), troubadour_cluster::discovery::DiscoveryError> {
    /// // In a pod: the service account's credentials.
    /// let seeds = KubernetesSeeds::in_cluster("prod", "app=vehicles", 7100).await?;
    /// # Ok(()) }
    /// ```
    #[derive(Clone)]
    pub struct KubernetesSeeds {
        pods: Api<Pod>,
        selector: String,
        port: u16,
        runtime: Option<tokio::runtime::Handle>,
    }

    impl KubernetesSeeds {
        /// Pods of `namespace` matching `selector` (`app=vehicles`), at
        /// `port`, with the credentials a pod has (or the kubeconfig).
        pub async fn in_cluster(
            namespace: &str,
            selector: &str,
            port: u16,
        ) -> Result<KubernetesSeeds, DiscoveryError> {
            let client = kube::Client::try_default()
                .await
                .map_err(|e| DiscoveryError::Kubernetes(format!("no client configuration: {e}")))?;
            Ok(KubernetesSeeds::with_client(
                client, namespace, selector, port,
            ))
        }

        /// The same through `client` (another API server, other
        /// credentials).
        pub fn with_client(
            client: kube::Client,
            namespace: &str,
            selector: &str,
            port: u16,
        ) -> KubernetesSeeds {
            KubernetesSeeds {
                pods: Api::namespaced(client, namespace),
                selector: selector.to_string(),
                port,
                runtime: tokio::runtime::Handle::try_current().ok(),
            }
        }

        async fn list(
            pods: Api<Pod>,
            selector: String,
            port: u16,
        ) -> Result<Vec<SocketAddr>, DiscoveryError> {
            let list = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| DiscoveryError::Kubernetes(e.to_string()))?;
            let mut addrs: Vec<SocketAddr> = list
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.status.as_ref())
                .filter(|s| s.phase.as_deref() == Some("Running"))
                .filter_map(|s| s.pod_ip.as_deref())
                .filter_map(|ip| ip.parse::<IpAddr>().ok())
                .map(|ip| SocketAddr::new(ip, port))
                .collect();
            addrs.sort();
            Ok(addrs)
        }
    }

    impl Discovery for KubernetesSeeds {
        fn seeds(&self) -> SeedsFuture<'_> {
            let work = KubernetesSeeds::list(self.pods.clone(), self.selector.clone(), self.port);
            super::on_runtime(self.runtime.as_ref(), work, DiscoveryError::Kubernetes)
        }
    }

    impl std::fmt::Debug for KubernetesSeeds {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("KubernetesSeeds")
                .field("selector", &self.selector)
                .field("port", &self.port)
                .finish_non_exhaustive()
        }
    }
}

// ---- asking until the node has company ---------------------------------------

/// Asks a discovery for seeds at start and every `every` while this node
/// sees no other member, and announces the node to whoever answers.
pub(crate) struct Discoverer {
    pub discovery: Arc<dyn Discovery>,
    pub membership: Membership,
    pub lookup: NodeLookup,
    pub every: Duration,
}

#[derive(Clone)]
struct Look;
impl Message for Look {
    type Reply = ();
}

impl Actor for Discoverer {
    fn started(&mut self, ctx: &mut Context<Self>) {
        let _ = ctx.myself().tell(Look);
        ctx.send_interval(self.every, Look);
    }
}

impl AsyncHandler<Look> for Discoverer {
    async fn handle(&mut self, _: Look, _: &mut Context<Self>) {
        if self.membership.members().len() > 1 {
            return;
        }
        match self.discovery.seeds().await {
            Ok(seeds) => {
                let answered = self.membership.join_at(&self.lookup, &seeds).await;
                tracing::debug!(
                    target: "troubadour::cluster",
                    found = seeds.len(),
                    answered,
                    "discovery"
                );
            }
            Err(e) => tracing::warn!(target: "troubadour::cluster", error = %e, "discovery failed"),
        }
    }
}
