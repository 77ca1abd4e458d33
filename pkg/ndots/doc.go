// Package ndots is the search path of the pods of this node: what a
// Kubernetes pod's resolver does with a short name under `ndots:5`, done
// once on the server (CoreDNS's autopath) instead of once per search
// domain by the client.
//
// It owns:
//   - the names: whether a query is the first expansion of a pod's list,
//     the list a glibc or musl client walks, the node's domains pods
//     inherit (Search), and whether an NXDOMAIN was an expansion the
//     client walks itself (SearchPath.Missed);
//   - the walk (SearchPath.Serve): the first step that exists wins and the
//     client gets `<asked> CNAME <winner>` plus the winner's answer in one
//     round trip; it is deterministic per (namespace, name), so A and AAAA
//     agree and one namespace's answer is never another's;
//   - its decisions (memo.go), kept a short time so that the two types of
//     one lookup take one path;
//   - the shortcut replies built from them in wire form (shortcut.go), so
//     that a repeated lookup is a copy and a patch on the reader, checked
//     on every use against what they were built from;
//   - the figures of every query's search path (Figures), which the
//     pipeline reports in its events.
//
// It knows nothing of where answers come from: the pipeline implements
// Stages ("run this name through the stage order", "does the access list
// allow it") and calls Serve once a query. Its limits: only pods of this
// node are walked (the client's namespace comes from the pod watch), and a
// walk a step of which fails is left undecided, the client then walking
// its list itself, exactly as without autopath.
package ndots
