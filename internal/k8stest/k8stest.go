// Package k8stest holds what the tests of pkg/k8s and pkg/k8s/pbdecode
// share to make Kubernetes API objects at random: a filler that gives
// every field a value the API server could have stored, so that the two
// decoding paths (the typed API objects, the protobuf bytes) can be
// compared on objects no fixture thought of. For tests only.
package k8stest

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/randfill"
)

// Filler fills API objects at random from seed: nil 3 times in 10, 0 to 3
// elements in a slice or map, and valid values for the types whose zero
// or random bytes would not marshal (times at whole nanoseconds in a
// range protobuf keeps, quantities, raw extensions left empty,
// IntOrString as an int).
func Filler(seed int64) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0.3).NumElements(0, 3).Funcs(
		func(tm *metav1.Time, c randfill.Continue) {
			if c.Bool() {
				*tm = metav1.Unix(c.Int63n(4e9), c.Int63n(1e9))
			} else {
				*tm = metav1.Time{}
			}
		},
		func(q *resource.Quantity, c randfill.Continue) {
			*q = resource.MustParse(fmt.Sprintf("%dm", c.Intn(1000)))
		},
		func(r *runtime.RawExtension, c randfill.Continue) {},
		func(v *intstr.IntOrString, c randfill.Continue) { *v = intstr.FromInt32(c.Int31()) },
	)
}
