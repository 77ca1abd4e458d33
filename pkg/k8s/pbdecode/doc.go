// Package pbdecode reads the Kubernetes API objects the cluster zone is
// built from (core/v1 Services, Namespaces and Pods, discovery/v1
// EndpointSlices) straight from their protobuf encoding, for pkg/k8s's
// list path: ReadList walks a list response item by item as it streams
// in, and a Decoder reads each item in place for the few fields DNS needs,
// skipping the rest without allocating. Decoding a list into the API types
// allocates every field of every object (metadata, managed fields, labels,
// annotations, each endpoint's conditions, target reference, node and
// zone) only for the informer transform to keep a few of them: at 10,000
// Services and 100,000 endpoint addresses that was most of the agent's
// start-up CPU and garbage.
//
// The package owns the wire format and nothing of what the fields mean.
// Its field structs (Service, EndpointSlice, Namespace, Pod) are what DNS
// reads of each kind, as the API types hold it; ServiceOf and the others
// fill the same structs from the decoded API types, for the informer
// transforms, so that pkg/k8s builds its objects with one constructor per
// kind from either, and the fields read are listed once. Their text type
// is a parameter (Text): []byte from a Decoder, pointing into the item,
// string from a decoded object.
//
// Field numbers are those of k8s.io/api's generated.proto and of
// k8s.io/apimachinery's meta/v1 and runtime (ListMeta, ObjectMeta,
// OwnerReference, Time, Unknown), which the API's compatibility rules
// freeze. Protobuf's merge rules are followed: a repeated field appends,
// a singular field takes its last occurrence, and a singular message that
// occurs more than once is merged (metadata, spec, status, an endpoint's
// conditions and targetRef are read field by field in every occurrence,
// which is the same thing; labels merge key by key).
//
// Limits:
//   - Only the fields DNS reads are read. Every other field is skipped by
//     its wire type, unchecked, as is a field read here that comes with
//     another wire type than its own: bytes the API types' Unmarshal
//     refuses may decode here.
//   - Timestamps keep whole seconds, as metav1.Time's Unmarshal does.
//   - A list body must have no content encoding, and one item is at most
//     MaxItem bytes.
//   - What a Decoder returns is valid until its next call; a Decoder is
//     not for concurrent use.
package pbdecode
