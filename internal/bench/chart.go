package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// ChartScenarios lists the scenarios of the report that swept more than one
// concurrency: the ones worth a chart.
func (rep *Report) ChartScenarios() []string {
	cs := map[string][]int{}
	var order []string
	for _, r := range rep.Results {
		if r.Error != "" || r.Scenario == ScenarioHandoff || r.Scenario == ScenarioKillFlood { // neither point is a throughput curve
			continue
		}
		if _, ok := cs[r.Scenario]; !ok {
			order = append(order, r.Scenario)
		}
		if !slices.Contains(cs[r.Scenario], r.Concurrency) {
			cs[r.Scenario] = append(cs[r.Scenario], r.Concurrency)
		}
	}
	return slices.DeleteFunc(order, func(s string) bool { return len(cs[s]) < 2 })
}

var palette = map[string]string{
	VariantRedis:        "#d62728",
	VariantPool:         "#1f77b4",
	VariantPoolBefore:   "#aec7e8",
	VariantPoolHeadScan: "#17becf",
	VariantRow:          "#7f7f7f",
	VariantBuckets:      "#2ca02c",
	VariantFacadeRedis:  "#ff7f0e",
	VariantFacadeShadow: "#9467bd",
	VariantFacadeMySQL:  "#8c564b",

	VariantFacadeMySQLNoFeed:     "#c49c94",
	VariantFacadeMySQLOnly:       "#e377c2",
	VariantFacadeMySQLOnlyNoFeed: "#f7b6d2",
}

// color is a variant's line colour; one without its own (the unbatched
// twins) is light grey.
func color(v string) string {
	if c, ok := palette[v]; ok {
		return c
	}
	return "#bbbbbb"
}

type series struct {
	name string
	pts  map[int]float64 // concurrency -> value (the median over rounds)
}

// WriteSVG draws a scenario's reserve throughput and p99 latency against
// concurrency, one line per variant, one row of two panels per added
// latency. Both axes of values are logarithmic: Redis and the MySQL
// variants are orders of magnitude apart.
func (rep *Report) WriteSVG(w io.Writer, scenario string) error {
	const pw, ph, left, top, gap = 430, 270, 70, 60, 40
	lats := rep.latencies()
	var xs []int
	var variants []string
	for _, r := range rep.Results {
		if r.Scenario != scenario || r.Op != "reserve" || r.Error != "" {
			continue
		}
		if !slices.Contains(xs, r.Concurrency) {
			xs = append(xs, r.Concurrency)
		}
		if !slices.Contains(variants, r.Variant) {
			variants = append(variants, r.Variant)
		}
	}
	slices.Sort(xs)
	slices.SortFunc(variants, func(a, b string) int { return variantRank(a) - variantRank(b) })
	width := left + 2*pw + gap + 40
	height := top + len(lats)*(ph+gap+40) + 30
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold">reservoir bench: %s — reserve throughput and p99 against callers</text>`+"\n", left, esc(scenario))
	fmt.Fprintf(&b, `<text x="%d" y="38" fill="#555">%s</text>`+"\n", left, esc(rep.Scenarios[scenario]))
	// Legend.
	lx := left
	for _, v := range variants {
		fmt.Fprintf(&b, `<line x1="%d" y1="50" x2="%d" y2="50" stroke="%s" stroke-width="3"/><text x="%d" y="54">%s</text>`+"\n", lx, lx+18, color(v), lx+22, esc(v))
		lx += 30 + 7*len(v)
	}
	for row, l := range lats {
		y0 := top + 20 + row*(ph+gap+40)
		for col, metric := range []string{"reserves/s", "p99 ms"} {
			x0 := left + col*(pw+gap)
			var ss []series
			for _, v := range variants {
				s := series{name: v, pts: map[int]float64{}}
				vals := map[int][]float64{} // a run of several rounds has one per round
				for _, r := range rep.Results {
					if r.Scenario == scenario && r.Variant == v && r.AddedRTTms == l && r.Op == "reserve" && r.Error == "" {
						val := r.OpsPerSec
						if col == 1 {
							val = r.P99ms
						}
						if val > 0 {
							vals[r.Concurrency] = append(vals[r.Concurrency], val)
						}
					}
				}
				for c, vs := range vals {
					s.pts[c] = median(vs)
				}
				if len(s.pts) > 0 {
					ss = append(ss, s)
				}
			}
			panel(&b, x0, y0, pw, ph, fmt.Sprintf("%s, +%dms round trip", metric, l), xs, ss)
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func panel(b *strings.Builder, x0, y0, w, h int, title string, xs []int, ss []series) {
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="12" font-weight="bold">%s</text>`+"\n", x0, y0-6, esc(title))
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, y0, w, h)
	if len(ss) == 0 || len(xs) == 0 {
		return
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, v := range s.pts {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi == dlo {
		dhi++
	}
	yOf := func(v float64) float64 {
		return float64(y0+h) - (math.Log10(v)-dlo)/(dhi-dlo)*float64(h)
	}
	xOf := func(i int) float64 {
		if len(xs) == 1 {
			return float64(x0 + w/2)
		}
		return float64(x0+25) + float64(i)*float64(w-50)/float64(len(xs)-1)
	}
	for d := dlo; d <= dhi; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if v < math.Pow(10, dlo) || v > math.Pow(10, dhi) {
				continue
			}
			y := yOf(v)
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
			}
			fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", x0, y, x0+w, y, stroke)
			fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", x0-4, y+4, number(v))
		}
	}
	for i, x := range xs {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%d</text>`+"\n", xOf(i), y0+h+14, x)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" fill="#555">callers (concurrency)</text>`+"\n", x0+w/2, y0+h+28)
	for _, s := range ss {
		var pts []string
		for i, x := range xs {
			if v, ok := s.pts[x]; ok {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(i), yOf(v)))
			}
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color(s.name), strings.Join(pts, " "))
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], color(s.name))
		}
	}
}

func number(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%gk", v/1000)
	case v >= 1:
		return fmt.Sprintf("%g", v)
	default:
		return fmt.Sprintf("%.2g", v)
	}
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
