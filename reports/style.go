package reports

import (
	"hash/fnv"
	"image/color"
	"math"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// namedColor is a chart colour with the word the Markdown report uses for
// it.
type namedColor struct {
	color.RGBA
	name string
}

// routeColors fix each route's colour in every chart (the Okabe-Ito
// palette, readable with the common colour-vision deficiencies).
var routeColors = map[string]namedColor{
	"flat":         {color.RGBA{0x00, 0x72, 0xB2, 0xFF}, "blue"},
	"agbcast":      {color.RGBA{0xD5, 0x5E, 0x00, 0xFF}, "vermilion"},
	"hierarchical": {color.RGBA{0x00, 0x9E, 0x73, 0xFF}, "green"},
	"nemo-legacy":  {color.RGBA{0xCC, 0x79, 0xA7, 0xFF}, "pink"},
}

// extraColors serve routes without a fixed colour, chosen by a hash of the
// route's name so that a route keeps its colour across reports.
var extraColors = []namedColor{
	{color.RGBA{0xE6, 0x9F, 0x00, 0xFF}, "orange"},
	{color.RGBA{0x56, 0xB4, 0xE9, 0xFF}, "sky blue"},
	{color.RGBA{0x00, 0x00, 0x00, 0xFF}, "black"},
}

func routeColor(route string) namedColor {
	if c, ok := routeColors[route]; ok {
		return c
	}
	h := fnv.New32a()
	h.Write([]byte(route))
	return extraColors[h.Sum32()%uint32(len(extraColors))]
}

var (
	keyColor      = color.RGBA{0x44, 0x44, 0x44, 0xFF} // legend keys that stand for every route
	gridColor     = color.RGBA{0xDD, 0xDD, 0xDD, 0xFF}
	subtitleColor = color.RGBA{0x55, 0x55, 0x55, 0xFF}
	unitColor     = color.RGBA{0x88, 0x88, 0x88, 0xFF} // the speedup chart's line at 1
)

// groupStyle tells apart the series of one route that differ in the sweeps
// not charted along the axis: the dash of the SOL line and the shape of
// the modeled mark.
type groupStyle struct {
	dashes []vg.Length
	glyph  draw.GlyphDrawer
}

var groupStyles = []groupStyle{
	{nil, draw.CircleGlyph{}},
	{[]vg.Length{vg.Points(7), vg.Points(3)}, draw.PyramidGlyph{}},
	{[]vg.Length{vg.Points(2), vg.Points(2)}, draw.BoxGlyph{}},
	{[]vg.Length{vg.Points(9), vg.Points(3), vg.Points(2), vg.Points(3)}, diamondGlyph{}},
	{[]vg.Length{vg.Points(14), vg.Points(4)}, invertedTriangleGlyph{}},
}

func styleOf(group int) groupStyle { return groupStyles[group%len(groupStyles)] }

// Sizes of lines and marks.
var (
	lineWidth      = vg.Points(1.6)
	markRadius     = vg.Points(3.6)
	measuredRadius = vg.Points(6.5)
	measuredWidth  = vg.Points(2)
)

// crossGlyph draws a bold X: the mark of a reference measurement.
type crossGlyph struct{ width vg.Length }

func (g crossGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: g.width})
	r := sty.Radius * vg.Length(math.Sqrt2/2)
	var p vg.Path
	p.Move(vg.Point{X: pt.X - r, Y: pt.Y - r})
	p.Line(vg.Point{X: pt.X + r, Y: pt.Y + r})
	c.Stroke(p)
	p = p[:0]
	p.Move(vg.Point{X: pt.X - r, Y: pt.Y + r})
	p.Line(vg.Point{X: pt.X + r, Y: pt.Y - r})
	c.Stroke(p)
}

// barGlyph draws a short horizontal bar: a SOL value shown at a single
// point, where there is no line to draw.
type barGlyph struct{ dashes []vg.Length }

func (g barGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: lineWidth, Dashes: g.dashes})
	var p vg.Path
	p.Move(vg.Point{X: pt.X - sty.Radius, Y: pt.Y})
	p.Line(vg.Point{X: pt.X + sty.Radius, Y: pt.Y})
	c.Stroke(p)
}

// diamondGlyph draws a filled diamond.
type diamondGlyph struct{}

func (diamondGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	r := sty.Radius * 1.25
	var p vg.Path
	p.Move(vg.Point{X: pt.X, Y: pt.Y + r})
	p.Line(vg.Point{X: pt.X + r, Y: pt.Y})
	p.Line(vg.Point{X: pt.X, Y: pt.Y - r})
	p.Line(vg.Point{X: pt.X - r, Y: pt.Y})
	p.Close()
	c.Fill(p)
}

// invertedTriangleGlyph draws a filled triangle pointing down.
type invertedTriangleGlyph struct{}

func (invertedTriangleGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	r := sty.Radius * 1.25
	var p vg.Path
	p.Move(vg.Point{X: pt.X, Y: pt.Y - r})
	p.Line(vg.Point{X: pt.X - r*0.866, Y: pt.Y + r*0.5})
	p.Line(vg.Point{X: pt.X + r*0.866, Y: pt.Y + r*0.5})
	p.Close()
	c.Fill(p)
}

// thumb is a legend key: a line, a mark, or both.
type thumb struct {
	line  *draw.LineStyle
	glyph *draw.GlyphStyle
}

func (t thumb) Thumbnail(c *draw.Canvas) {
	if t.line != nil {
		y := c.Center().Y
		c.StrokeLine2(*t.line, c.Min.X, y, c.Max.X, y)
	}
	if t.glyph != nil {
		c.DrawGlyphNoClip(*t.glyph, c.Center())
	}
}
