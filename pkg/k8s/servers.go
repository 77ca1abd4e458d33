package k8s

import (
	"net/netip"
	"slices"
)

// ServiceServer is one address serving a Service, with the ports its
// EndpointSlice gives for UDP and for TCP.
type ServiceServer struct {
	Addr             netip.Addr
	UDPPort, TCPPort uint16
}

// defaultServerPort is the port of a protocol a slice does not list.
const defaultServerPort = 53

// ServiceServers returns the addresses serving the Service
// namespace/name, by family, for the agent's DNS fallback (targets of a
// kernel DNAT, so real addresses, never the ClusterIP):
//   - the ready endpoint addresses of its EndpointSlices;
//   - for an endpoint address that belongs to a pod of this node
//     (Config.NodeName), every address of that pod. EndpointSlices carry
//     only the Service's families, so this is the one way to a target of
//     another family: a dual-stack pod behind a single-stack Service, or a
//     pod's IPv4 link-local address beside its IPv6 one.
//
// Ports: each slice's UDP and TCP port (port 53 if the slice lists it for
// that protocol, else the first), 53 for a protocol the slice lacks.
// Each family's list is sorted by address, without repeats (the first
// slice's ports win), and cut at perFamily addresses when perFamily > 0.
// found is false until the index has synced, and for a Service it does
// not know.
func (ix *Index) ServiceServers(namespace, name string, perFamily int) (v4, v6 []ServiceServer, found bool) {
	if !ix.Synced() {
		return nil, nil, false
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	v := ix.records[name+"."+namespace]
	if v == nil {
		return nil, nil, false
	}
	seen := make(map[netip.Addr]bool)
	add := func(ip netip.Addr, udp, tcp uint16) {
		ip = ip.Unmap()
		if seen[ip] || !ip.IsValid() {
			return
		}
		seen[ip] = true
		s := ServiceServer{Addr: ip, UDPPort: udp, TCPPort: tcp}
		if ip.Is4() {
			v4 = append(v4, s)
		} else {
			v6 = append(v6, s)
		}
	}
	for _, sl := range v.slices {
		udp, tcp := serverPort(sl.ports, "udp"), serverPort(sl.ports, "tcp")
		for i := range sl.len() {
			ip := sl.ip(i)
			add(ip, udp, tcp)
			if p := newestPod(ix.localPods[ip]); p != nil {
				for _, pip := range p.ips {
					add(pip, udp, tcp)
				}
			}
		}
	}
	sortCut := func(s []ServiceServer) []ServiceServer {
		slices.SortFunc(s, func(a, b ServiceServer) int { return a.Addr.Compare(b.Addr) })
		if perFamily > 0 && len(s) > perFamily {
			s = s[:perFamily]
		}
		return s
	}
	return sortCut(v4), sortCut(v6), true
}

// serverPort is a slice's port for proto: 53 if listed for it, else the
// first listed for it, else 53.
func serverPort(ports []port, proto string) uint16 {
	first := uint16(0)
	for _, p := range ports {
		if p.proto != proto || p.port <= 0 || p.port > 65535 {
			continue
		}
		if p.port == defaultServerPort {
			return defaultServerPort
		}
		if first == 0 {
			first = uint16(p.port)
		}
	}
	if first == 0 {
		return defaultServerPort
	}
	return first
}

// IsClusterIP reports whether ip is a ClusterIP of a Service the index
// knows (false until it has synced).
func (ix *Index) IsClusterIP(ip netip.Addr) bool {
	if !ix.Synced() {
		return false
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.clusterIPs[ip.Unmap()]) > 0
}

// DNSService is the cluster DNS Service, "namespace/name" (Config.DNSService
// or its default).
func (ix *Index) DNSService() string { return ix.cfg.DNSService }

// PodGeneration is a counter that moves after every change to this
// node's pods (what PodNamespace and the second part of ServiceServers
// read), which Generation does not count unless pods are verified.
func (ix *Index) PodGeneration() uint64 { return ix.podGen.Load() }
