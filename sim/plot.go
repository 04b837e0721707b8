package sim

import (
	"fmt"
	"image/color"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// strategyColor keeps each strategy's colour the same in every plot.
func strategyColor(name string) color.RGBA {
	switch name {
	case "central":
		return color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff}
	case "even-split":
		return color.RGBA{R: 0xdd, G: 0x84, B: 0x52, A: 0xff}
	case "quota-lease":
		return color.RGBA{R: 0x55, G: 0xa8, B: 0x68, A: 0xff}
	case staticRegions:
		return color.RGBA{R: 0x81, G: 0x72, B: 0xb3, A: 0xff}
	}
	return color.RGBA{R: 0xc4, G: 0x4e, B: 0x52, A: 0xff}
}

// WritePlots writes two PNGs into dir: admitted.png (admitted per window
// against what was due, one line per strategy) and shares.png (each node's
// share of tenant 0's limit over time, under quota-lease).
func WritePlots(dir string, s *Scenario, results []*Result) ([]string, error) {
	var files []string
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: admitted per %v against the limit", s.Name, s.Rule.Period)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "requests per window"
	p.Legend.Top = true
	var limit plotter.XYs
	for i, r := range results {
		pts := make(plotter.XYs, len(r.Windows))
		for j, w := range r.Windows {
			pts[j].X, pts[j].Y = w.Start.Seconds(), float64(w.Admitted)
			if i == 0 {
				limit = append(limit, plotter.XY{X: w.Start.Seconds(), Y: float64(w.Due)})
			}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		line.Color, line.Width = strategyColor(r.Strategy), vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(r.Strategy, line)
	}
	if len(limit) > 0 {
		line, err := plotter.NewLine(limit)
		if err != nil {
			return nil, err
		}
		line.Color, line.Dashes, line.Width = color.RGBA{A: 0xff}, []vg.Length{vg.Points(4), vg.Points(3)}, vg.Points(1)
		p.Add(line)
		p.Legend.Add("due: min(offered, limit)", line)
	}
	path := filepath.Join(dir, "admitted.png")
	if err := p.Save(10*vg.Inch, 5*vg.Inch, path); err != nil {
		return nil, fmt.Errorf("sim: plot: %w", err)
	}
	files = append(files, path)

	for _, r := range results {
		if r.Strategy != "quota-lease" || len(r.Shares) == 0 {
			continue
		}
		sp := plot.New()
		sp.Title.Text = fmt.Sprintf("%s: each node's share of tenant 0's limit (quota-lease)", s.Name)
		sp.X.Label.Text = "time (s)"
		sp.Y.Label.Text = "share per period"
		nodes := 0
		for _, row := range r.Shares {
			nodes = max(nodes, len(row))
		}
		drawn := 0
		for n := 0; n < nodes && drawn < 12; n++ {
			var pts plotter.XYs
			peak := 0.0
			for k, row := range r.Shares {
				v := 0.0
				if n < len(row) {
					v = row[n]
				}
				peak = max(peak, v)
				pts = append(pts, plotter.XY{X: (time.Duration(k) * s.Interval).Seconds(), Y: v})
			}
			if peak <= float64(s.Rule.Limit)/float64(s.Nodes)*1.01 {
				continue // a node that never held more than an even share
			}
			line, err := plotter.NewLine(pts)
			if err != nil {
				return nil, err
			}
			line.Width = vg.Points(1.2)
			line.Color = plotColor(drawn)
			sp.Add(line)
			sp.Legend.Add(fmt.Sprintf("node %d", n), line)
			drawn++
		}
		path := filepath.Join(dir, "shares.png")
		if err := sp.Save(10*vg.Inch, 5*vg.Inch, path); err != nil {
			return nil, fmt.Errorf("sim: plot: %w", err)
		}
		files = append(files, path)
	}
	return files, nil
}

func plotColor(i int) color.RGBA {
	cs := []color.RGBA{{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
		{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
		{0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff}, {0x00, 0x00, 0x00, 0xff}, {0x99, 0x99, 0x00, 0xff}}
	return cs[i%len(cs)]
}
