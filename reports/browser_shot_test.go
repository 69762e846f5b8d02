package reports

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lookAtTheScreenshot looks at the page as a user sees it, not at its
// HTML: a screenshot of the first screen shows the root-cause cards (the
// invalid colour of their count) and the fault lanes show each nemesis's
// fixed colour in the pixels of the timeline's top. With
// FENCECHECK_UPDATE_SCREENSHOT=1 it writes docs/report-root-causes.png.
func lookAtTheScreenshot(t *testing.T, b *browser, s pageState) {
	t.Helper()
	var first, lanes []byte
	require.NoError(t, chromedp.Run(b.ctx,
		emulation.SetDeviceMetricsOverride(1280, 900, 1, false),
		chromedp.Sleep(200*time.Millisecond),
		chromedp.Evaluate(`window.scrollTo(0, 0)`, nil),
		chromedp.CaptureScreenshot(&first),
	))
	// The lanes: a clip of the timeline's top, in page coordinates.
	var box struct{ X, Y, W, H float64 }
	require.NoError(t, chromedp.Run(b.ctx, chromedp.Evaluate(`(() => {
	  const r = document.getElementById("tl-wrap").getBoundingClientRect();
	  return {X: r.left + scrollX, Y: r.top + scrollY, W: r.width, H: 80};
	})()`, &box)))
	require.NoError(t, chromedp.Run(b.ctx, chromedp.ActionFunc(func(ctx2 context.Context) error {
		var err error
		lanes, err = page.CaptureScreenshot().WithCaptureBeyondViewport(true).
			WithClip(&page.Viewport{X: box.X, Y: box.Y, Width: box.W, Height: box.H, Scale: 1}).Do(ctx2)
		return err
	})))
	shot := decodePNG(t, first)
	assert.Positive(t, countColor(shot, "#c0392b"), "the first screen shows the root causes (the invalid colour of the banner and the cards' counts)")
	laneShot := decodePNG(t, lanes)
	for _, n := range s.LaneNames {
		assert.Positive(t, countColor(laneShot, colorOf(n)), "the %s lane shows its colour %s in the screenshot", n, colorOf(n))
	}
	if os.Getenv("FENCECHECK_UPDATE_SCREENSHOT") != "" {
		require.NoError(t, os.WriteFile(filepath.Join("..", "docs", "report-root-causes.png"), first, 0o644))
		var tl []byte
		require.NoError(t, chromedp.Run(b.ctx, chromedp.Screenshot("#timeline", &tl, chromedp.ByID)))
		require.NoError(t, os.WriteFile(filepath.Join("..", "docs", "report-lanes.png"), tl, 0o644))
	}
}

func decodePNG(t *testing.T, b []byte) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	return img
}

// countColor counts the pixels of img within a small distance of hex.
func countColor(img image.Image, hex string) int {
	want := parseHex(hex)
	n := 0
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if near(uint8(r>>8), want.R) && near(uint8(g>>8), want.G) && near(uint8(b>>8), want.B) {
				n++
			}
		}
	}
	return n
}

func near(a, b uint8) bool { return int(a)-int(b) <= 6 && int(b)-int(a) <= 6 }

func parseHex(h string) color.RGBA {
	v, _ := strconv.ParseUint(h[1:], 16, 32)
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 255}
}
