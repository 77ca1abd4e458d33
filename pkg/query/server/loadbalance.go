package server

// SetLoadBalance turns the round-robin order of A and AAAA records in
// replies on or off while the server runs (CoreDNS's `loadbalance
// round_robin`). The rotation happens in finish, in wire form, on the copy
// of the reply being sent: cache hits and packed cluster answers keep
// costing no allocation (TestHotPathAllocs).
func (s *Server) SetLoadBalance(on bool) { s.loadBalance.Store(on) }
