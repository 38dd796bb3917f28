package bench

import (
	"bytes"
	"image/png"
	"strings"
	"testing"
)

func TestChartDrawsAPNG(t *testing.T) {
	c := Chart{Title: "drain against keys", XLabel: "keys", YLabel: "events/s", LogX: true, Series: []Series{
		{Name: "relay", X: []float64{1, 10, 100, 1000, 100000}, Y: []float64{9000, 21000, 40000, 52000, 55000}},
		{Name: "naive relay", X: []float64{1, 10, 100, 1000, 100000}, Y: []float64{60000, 61000, 59000, 60500, 58000}},
	}}
	var buf bytes.Buffer
	if err := c.WritePNG(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != chartW || b.Dy() != chartH {
		t.Fatalf("size %v", b)
	}
	// a line's colour is somewhere inside the plot
	r0, g0, b0, _ := palette[0].RGBA()
	found := false
	for y := padTop; y < chartH-padBottom && !found; y++ {
		for x := padLeft; x < chartW-padRight; x++ {
			if r, g, b, _ := img.At(x, y).RGBA(); r == r0 && g == g0 && b == b0 {
				found = true
				break
			}
		}
	}
	if !found {
		t.Fatal("the first series is not drawn")
	}
}

func TestChartRefusesWhatItCannotDraw(t *testing.T) {
	for name, c := range map[string]Chart{
		"empty":      {},
		"log of 0":   {LogX: true, Series: []Series{{Name: "a", X: []float64{0, 1}, Y: []float64{1, 2}}}},
		"mismatched": {Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{1}}}},
	} {
		err := c.WritePNG(&bytes.Buffer{})
		if err == nil || !strings.HasPrefix(err.Error(), "chart: ") {
			t.Errorf("%s: err = %v, want one line starting with chart:", name, err)
		}
	}
}

func TestHumanNumber(t *testing.T) {
	for v, want := range map[float64]string{1: "1", 10: "10", 1500: "1.5k", 100000: "100k", 2e6: "2M", 0.5: "0.5"} {
		if got := humanNumber(v); got != want {
			t.Errorf("humanNumber(%v) = %q, want %q", v, got, want)
		}
	}
}
