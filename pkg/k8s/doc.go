// Package k8s is the agent's authority for the cluster zone: it answers
// names under the cluster domain (Services, their endpoints and ports, pods,
// the apex) and PTR queries for the ClusterIPs and endpoint addresses it
// knows, from informer caches of the API server, so cluster names never
// leave the node.
//
// It owns the Service, EndpointSlice (discovery.k8s.io/v1), Namespace and,
// when a mode needs them, Pod informers (for multicluster zones also the
// ServiceImport and imported EndpointSlice informers); how they list
// (list.go): at resourceVersion "0", whole, from the API server's watch
// cache, never a paged quorum read from etcd; the stripped objects the
// informer stores hold in place of the API types, each made by one
// constructor per kind (objects.go); and the index built from them. A
// protobuf list is read as a stream, each item read in place by package
// pbdecode (pkg/k8s/pbdecode, which owns the wire format) for the fields
// the constructor reads; a watch event's object, decoded by client-go, is
// read for the same fields by the informer transform. An event rebuilds
// the records of the one Service it touches (records.go). A query is a
// few map lookups: the answers of bare service names and the zone's
// negative answers are prebuilt, shared messages; endpoint, port, SRV, pod
// and PTR answers are assembled from prebuilt per-service data in time
// proportional to the answer, and the service's records keep them for the
// next query. The index holds about 200 bytes per Service or endpoint
// address.
//
// The semantics are those of CoreDNS's kubernetes plugin, which implements
// the Kubernetes DNS specification v1.1.0; comments mark each deliberate
// difference.
//
// The options of CoreDNS's kubernetes plugin that change answers are
// Config fields with the plugin's semantics: several zones from one index,
// endpoint_pod_names, ignore empty_service, noendpoints, namespaces,
// namespace_labels, fallthrough and multicluster.
//
// Limits:
//   - Zonal names, wildcards (removed from CoreDNS in 1.9) and the
//     `labels` Service filter are not implemented. Multi-Cluster Services
//     (Config.MulticlusterZones, multicluster.go) are.
//   - In the reverse zones only PTR queries are answered; other types go
//     to the upstream.
//   - In verified pod mode every pod of the cluster is watched, as in
//     CoreDNS: about 100 bytes per pod, and an API watch that grows with
//     the cluster. The default, insecure, watches only this node's pods,
//     and does without them (no search-path walk) when RBAC forbids it.
//   - A list from the watch cache may be older than etcd (another API
//     server's cache, just behind): the watch that follows brings the rest,
//     as for kube-proxy.
//   - Until the informers have synced, in-zone names return NotSynced
//     (never NXDOMAIN) and reverse names are left to the upstream.
//   - After the API server goes away, the last known state is served while
//     client-go relists; there is no staleness limit.
//   - One answer holds at most what one reply carries over TCP (records.go:
//     4,000 A, 2,300 AAAA, 1,000 SRV records and the work to build them):
//     a Service with more ready endpoints answers with the first of them,
//     and says so in the log. Namespaces keep only the labels the
//     namespace-labels selector reads; a list body that is not protobuf is
//     read up to 1 GiB.
//
// Beneath it: pkg/k8s/pbdecode reads list pages from their protobuf bytes,
// and pkg/k8s/kubedns reads the kube-dns ConfigMap (stub domains and
// upstream nameservers) from its mounted directory.
package k8s
