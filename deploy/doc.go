// Package deploy holds no code: it is the directory of the manifests a
// cluster installs (the DaemonSet, the optional PodMonitor, alerting rules,
// the Grafana dashboard). Its tests check those files against the types
// and tools that consume them.
package deploy
