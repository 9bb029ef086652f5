package web

import (
	"math"
	"strconv"
	"strings"

	"github.com/eosink/eosink/internal/catalog"
)

// Chart geometry, in SVG user units; the stylesheet scales the SVG to its
// box.
const (
	chartW      = 540
	chartH      = 190
	chartLeft   = 58
	chartRight  = 4
	chartTop    = 10
	chartBottom = 24
	// chartSlots is the least number of bar slots: a few checkpoints draw
	// narrow bars at the right, the newest end.
	chartSlots = 24
)

// chart is a bar chart drawn as inline SVG by the template.
type chart struct {
	Title   string
	Unit    string
	W, H    int
	PlotX   float64
	PlotY   float64
	PlotW   float64
	PlotH   float64
	PlotR   float64 // x of the right edge
	Bottom  float64 // y of the x axis
	Bars    []bar
	Ticks   []tick // y axis
	XLabels []tick
	Peak    string // the largest value, formatted
	Last    string // the newest value, formatted
	Empty   bool
}

// bar is one checkpoint's bar, with a full-height hit area for its link.
type bar struct {
	X, Y, W, H             float64
	HitX, HitY, HitW, HitH float64 // the slot: hovering it shows the label
	Class                  string
	Label                  string
	URL                    string
}

// tick is an axis label.
type tick struct {
	X, Y  float64
	Label string
}

// round1 rounds to one decimal, so the SVG stays short.
func round1(v float64) float64 { return math.Round(v*10) / 10 }

// niceStep returns the step between y-axis ticks for values up to peak:
// 1, 2 or 5 times a power of ten, at least 1, so that peak takes at most 5
// steps. With binary units (base 1024) the step is nice in the unit of the
// peak: 1 KiB, 2 MiB, 500 MiB.
func niceStep(peak float64, binary bool) float64 {
	unit := 1.0
	if binary {
		for peak/unit >= 1024 {
			unit *= 1024
		}
	}
	raw := peak / unit / 5
	if raw*unit <= 1 {
		return 1
	}
	exp := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*exp >= raw {
			return math.Max(1, m*exp*unit)
		}
	}
	return 10 * exp * unit
}

// barChart charts value over checkpoints given newest first, drawn oldest
// on the left.
// Binary tells niceStep to step in KiB, MiB, ...
func barChart(title, unit string, binary bool, cs []catalog.Checkpoint, value func(*catalog.Checkpoint) float64, format func(float64) string) chart {
	c := chart{Title: title, Unit: unit, W: chartW, H: chartH, PlotX: chartLeft, PlotY: chartTop,
		PlotW: chartW - chartLeft - chartRight, PlotH: chartH - chartTop - chartBottom}
	c.Bottom, c.PlotR = c.PlotY+c.PlotH, c.PlotX+c.PlotW
	if len(cs) == 0 {
		c.Empty = true
		return c
	}
	peak := 0.0
	for i := range cs {
		peak = max(peak, value(&cs[i]))
	}
	step := niceStep(math.Max(peak, 1), binary)
	steps := max(1, int(math.Ceil(peak/step)))
	top := step * float64(steps)
	c.Peak, c.Last = format(peak), format(value(&cs[0]))
	for i := 0; i <= steps; i++ {
		label := strings.Replace(format(step*float64(i)), ".0 ", " ", 1)
		c.Ticks = append(c.Ticks, tick{X: c.PlotX - 8, Y: round1(c.Bottom - c.PlotH*float64(i)/float64(steps)), Label: label})
	}
	n := len(cs)
	slots := max(n, chartSlots)
	slot := c.PlotW / float64(slots)
	w := math.Max(1, slot*0.7)
	left := c.PlotX + slot*float64(slots-n) // right-aligned: the newest at the right edge
	for j := 0; j < n; j++ {
		ck := &cs[n-1-j] // oldest first
		v := value(ck)
		h := c.PlotH * v / top
		if v > 0 && h < 1 {
			h = 1
		}
		x := left + slot*float64(j) + (slot-w)/2
		class := "bar"
		switch {
		case ck.State == catalog.Aborted:
			class += " bar-aborted"
		case ck.State != catalog.Committed:
			class += " bar-pending"
		}
		c.Bars = append(c.Bars, bar{
			X: round1(x), Y: round1(c.Bottom - h), W: round1(w), H: round1(h),
			HitX: round1(left + slot*float64(j)), HitW: round1(slot), HitY: c.PlotY, HitH: c.PlotH, Class: class,
			Label: "#" + strconv.FormatUint(ck.ID, 10) + " " + string(ck.State) + ": " + format(v),
			URL:   "/ui/checkpoints/" + strconv.FormatUint(ck.ID, 10),
		})
	}
	label := func(j int) tick {
		return tick{X: round1(left + slot*float64(j) + slot/2), Y: c.Bottom + 17, Label: "#" + strconv.FormatUint(cs[n-1-j].ID, 10)}
	}
	c.XLabels = append(c.XLabels, label(0))
	if n > 2 {
		c.XLabels = append(c.XLabels, label(n/2))
	}
	if n > 1 {
		c.XLabels = append(c.XLabels, label(n-1))
	}
	return c
}
