package main

import (
	"fmt"
	"strconv"
)

// A series is one figure of one server over the rounds, a value per round,
// each kept as the run printed it (rounded to its format), so that the
// mean and the spread are of the figures the progress lines show.
type series []float64

// mean is the series' mean, truncated to an integer; 0 for no value.
func (s series) mean() int {
	if len(s) == 0 {
		return 0
	}
	var sum float64
	for _, v := range s {
		sum += v
	}
	return int(sum / float64(len(s)))
}

// spread prints the series as "MEAN (MIN–MAX)", each with the verb f
// ("%d" truncates, as printf's %d of a fraction does; "%.1f", "%.2f"
// round); the value alone for one round, "-" for none.
func (s series) spread(f string) string {
	if len(s) == 0 {
		return "-"
	}
	lo, hi, sum := s[0], s[0], 0.0
	for _, v := range s {
		sum += v
		lo = min(lo, v)
		hi = max(hi, v)
	}
	m := format(f, sum/float64(len(s)))
	if len(s) == 1 {
		return m
	}
	return fmt.Sprintf("%s (%s–%s)", m, format(f, lo), format(f, hi))
}

// format prints x with the verb f; %d truncates toward zero.
func format(f string, x float64) string {
	if f == "%d" {
		return strconv.FormatInt(int64(x), 10)
	}
	return fmt.Sprintf(f, x)
}

// rounded is x as format f prints it, read back: a figure kept as printed.
func rounded(f string, x float64) float64 {
	v, err := strconv.ParseFloat(format(f, x), 64)
	if err != nil {
		panic(fmt.Sprintf("rounded(%q, %v): %v", f, x, err)) // format prints a number
	}
	return v
}

// g6 is x printed with six significant digits and read back, the
// precision the figures had when the shell's awk summed them (OFMT %.6g).
func g6(x float64) float64 {
	v, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 6, 64), 64)
	if err != nil {
		panic(fmt.Sprintf("g6(%v): %v", x, err))
	}
	return v
}

// ratio is a over b with two decimals ("0.00" when b is 0): the "vs best"
// column.
func ratio(a, b float64) string {
	if b == 0 {
		return "0.00"
	}
	return fmt.Sprintf("%.2f", g6(a/b))
}

// best is the highest mean of the servers' series under key.
func best(acc map[string]*figures, servers []string, key func(*figures) series) int {
	b := 0
	for _, s := range servers {
		b = max(b, key(acc[s]).mean())
	}
	return b
}

// percentile of sorted values the way the driver always took it: the
// value at index int(n·p) (0-based), 0 for none.
func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)) * p)
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}
