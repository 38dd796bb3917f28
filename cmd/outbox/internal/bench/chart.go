package bench

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The chart is drawn here with the standard library's image and png
// packages and x/image's fixed-size font: a few lines and labels do not
// need a plotting library and its dependencies in the CLI.

// Series is one line of a Chart.
type Series struct {
	Name string
	X, Y []float64
}

// Chart is a line chart of figures against one swept setting.
type Chart struct {
	Title, XLabel, YLabel string
	LogX                  bool // a logarithmic x axis (key counts, backlog sizes)
	Series                []Series
}

const (
	chartW, chartH                       = 900, 540
	padLeft, padRight, padTop, padBottom = 90, 30, 50, 70
)

var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
}

// WritePNG draws the chart and encodes it as PNG to w.
func (c Chart) WritePNG(w io.Writer) error {
	xmin, xmax, ymax, err := c.bounds()
	if err != nil {
		return err
	}
	img := image.NewRGBA(image.Rect(0, 0, chartW, chartH))
	fillRect(img, img.Bounds(), color.RGBA{0xff, 0xff, 0xff, 0xff})
	plot := image.Rect(padLeft, padTop, chartW-padRight, chartH-padBottom)
	ytop := niceCeil(ymax)
	xpos := func(x float64) int {
		if c.LogX {
			x, xmin, xmax := math.Log10(x), math.Log10(xmin), math.Log10(xmax)
			return plot.Min.X + int(float64(plot.Dx())*(x-xmin)/math.Max(xmax-xmin, 1e-9))
		}
		return plot.Min.X + int(float64(plot.Dx())*(x-xmin)/math.Max(xmax-xmin, 1e-9))
	}
	ypos := func(y float64) int { return plot.Max.Y - int(float64(plot.Dy())*y/ytop) }

	grid := color.RGBA{0xe0, 0xe0, 0xe0, 0xff}
	ink := color.RGBA{0x20, 0x20, 0x20, 0xff}
	for i := 0; i <= 5; i++ {
		v := ytop * float64(i) / 5
		y := ypos(v)
		line(img, plot.Min.X, y, plot.Max.X, y, grid, 1)
		label := humanNumber(v)
		text(img, plot.Min.X-8-7*len(label), y+4, label, ink)
	}
	ticks := map[float64]bool{}
	for _, s := range c.Series {
		for _, x := range s.X {
			ticks[x] = true
		}
	}
	for x := range ticks {
		px := xpos(x)
		line(img, px, plot.Max.Y, px, plot.Max.Y+5, ink, 1)
		label := humanNumber(x)
		text(img, px-7*len(label)/2, plot.Max.Y+20, label, ink)
	}
	line(img, plot.Min.X, plot.Max.Y, plot.Max.X, plot.Max.Y, ink, 1)
	line(img, plot.Min.X, plot.Min.Y, plot.Min.X, plot.Max.Y, ink, 1)
	text(img, padLeft, 28, c.Title, ink)
	text(img, plot.Min.X+plot.Dx()/2-7*len(c.XLabel)/2, chartH-22, c.XLabel, ink)
	text(img, 8, padTop-12, c.YLabel, ink)

	for i, s := range c.Series {
		col := palette[i%len(palette)]
		for j := range s.X {
			x, y := xpos(s.X[j]), ypos(s.Y[j])
			fillRect(img, image.Rect(x-3, y-3, x+4, y+4), col)
			if j > 0 {
				line(img, xpos(s.X[j-1]), ypos(s.Y[j-1]), x, y, col, 2)
			}
		}
		ly := plot.Min.Y + 14 + 18*i
		fillRect(img, image.Rect(plot.Max.X-230, ly-6, plot.Max.X-212, ly-2), col)
		text(img, plot.Max.X-205, ly, s.Name, ink)
	}
	return png.Encode(w, img)
}

// bounds returns the x range and the largest y, or why nothing can be drawn.
func (c Chart) bounds() (xmin, xmax, ymax float64, err error) {
	xmin, xmax = math.Inf(1), math.Inf(-1)
	n := 0
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return 0, 0, 0, fmt.Errorf("chart: series %q has %d x values and %d y values", s.Name, len(s.X), len(s.Y))
		}
		for i, x := range s.X {
			if c.LogX && x <= 0 {
				return 0, 0, 0, fmt.Errorf("chart: series %q: x = %v on a logarithmic axis (must be > 0)", s.Name, x)
			}
			xmin, xmax, ymax = math.Min(xmin, x), math.Max(xmax, x), math.Max(ymax, s.Y[i])
			n++
		}
	}
	if n == 0 {
		return 0, 0, 0, errors.New("chart: no points to draw")
	}
	return xmin, xmax, math.Max(ymax, 1), nil
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// humanNumber writes 1500 as 1.5k and 2000000 as 2M.
func humanNumber(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(math.Round(v/100)/10, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

func fillRect(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// line draws from (x0,y0) to (x1,y1), width pixels wide (Bresenham).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, width int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		fillRect(img, image.Rect(x0, y0, x0+width, y0+width), c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}
