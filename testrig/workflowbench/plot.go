package workflowbench

import (
	"fmt"
	"image/color"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotCDF draws, per workload, the latency distribution (CDF, log x) of
// every system whose data is on PostgreSQL, and writes a PNG to path.
func plotCDF(path string, rows []Row) error {
	var panels []*plot.Plot
	for _, wl := range []string{"advance", "approve"} {
		var sel []Row
		for _, r := range rows {
			if r.Workload == wl && r.Engine == "postgres" && len(r.Latency) > 0 {
				sel = append(sel, r)
			}
		}
		if len(sel) == 0 {
			continue
		}
		p := plot.New()
		switch wl {
		case "advance":
			p.Title.Text = "advance: 100 workers × 20 transitions n → n+1 on one instance (PostgreSQL, fsync on)"
		default:
			p.Title.Text = "approve: 100 workers PENDING → APPROVED at once, 50 rounds (PostgreSQL, fsync on)"
		}
		p.X.Label.Text = "latency per transition, retries and waits included (ms, log scale)"
		p.Y.Label.Text = "fraction of transitions at most this long"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min, p.Y.Max = 0, 1
		p.Legend.Top = wl == "approve" // where the curves are not
		p.Legend.Left = wl == "approve"
		p.Legend.XOffs = -vg.Points(4)
		p.Legend.YOffs = vg.Points(4)
		if wl == "approve" {
			p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), -vg.Points(4)
		}
		p.Add(plotter.NewGrid())
		ours, docs := 0, 0
		for _, r := range sel {
			pts := cdfPoints(r.Latency, 500)
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Width = vg.Points(1.6)
			if r.Baseline {
				l.Color = baselineColor(docs)
				l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
				docs++
			} else {
				l.Color = plotutil.Color(ours)
				ours++
			}
			p.Add(l)
			text := fmt.Sprintf("%s: success %.0f %%, p99 %s", label(r), 100*r.Success(), fmtDur(r.Pct(99)))
			if wl == "advance" {
				text = fmt.Sprintf("%s: %.0f applied/s, success %.0f %%, p99 %s", label(r), r.AppliedPerSec(), 100*r.Success(), fmtDur(r.Pct(99)))
			}
			p.Legend.Add(text, l)
		}
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return nil
	}
	const w, hPer = 30 * vg.Centimeter, 16 * vg.Centimeter
	img := vgimg.NewWith(vgimg.UseWH(w, hPer*vg.Length(len(panels))), vgimg.UseDPI(110))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(10), PadY: vg.Points(14)}
	grid := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		grid[i] = []*plot.Plot{p}
	}
	canvases := plot.Align(grid, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func baselineColor(i int) color.Color {
	cs := []color.Color{
		color.RGBA{R: 120, G: 120, B: 120, A: 255},
		color.RGBA{R: 200, G: 120, B: 30, A: 255},
		color.RGBA{R: 150, G: 60, B: 160, A: 255},
		color.RGBA{R: 40, G: 40, B: 40, A: 255},
	}
	return cs[i%len(cs)]
}

// cdfPoints samples the empirical CDF of sorted at most n points.
func cdfPoints(sorted []time.Duration, n int) plotter.XYs {
	step := max(len(sorted)/n, 1)
	var pts plotter.XYs
	for i := 0; i < len(sorted); i += step {
		pts = append(pts, plotter.XY{X: ms(sorted[i]), Y: float64(i+1) / float64(len(sorted))})
	}
	pts = append(pts, plotter.XY{X: ms(sorted[len(sorted)-1]), Y: 1})
	return pts
}

func ms(d time.Duration) float64 { return max(float64(d)/1e6, 0.001) }
