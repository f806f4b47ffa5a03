package dashboard_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/server/dashboard"
)

func get(t *testing.T, h http.Handler, method, path string, hdr ...string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func TestHandlerServesFiles(t *testing.T) {
	h := dashboard.Handler()
	for _, tc := range []struct {
		path, ctype, contains string
	}{
		{"/dashboard/", "text/html; charset=utf-8", `<script src="dashboard.js"`},
		{"/dashboard/dashboard.js", "text/javascript; charset=utf-8", "textContent"},
		{"/dashboard/draw.js", "text/javascript; charset=utf-8", "createElementNS"},
		{"/dashboard/read.js", "text/javascript; charset=utf-8", "export function scheduleRefresh"},
		{"/dashboard/format.js", "text/javascript; charset=utf-8", "export function normLease"},
		{"/dashboard/dashboard.css", "text/css; charset=utf-8", "--accent"},
		{"/dashboard/favicon.svg", "image/svg+xml", "<svg"},
		// Mounted behind http.StripPrefix the paths arrive without the prefix.
		{"/", "text/html; charset=utf-8", "<title>leasehold dashboard</title>"},
		{"/dashboard.js", "text/javascript; charset=utf-8", "use strict"},
	} {
		res := get(t, h, http.MethodGet, tc.path)
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s: status %d", tc.path, res.StatusCode)
			continue
		}
		if got := res.Header.Get("Content-Type"); got != tc.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", tc.path, got, tc.ctype)
		}
		if !strings.Contains(string(body), tc.contains) {
			t.Errorf("GET %s: body lacks %q", tc.path, tc.contains)
		}
		for _, k := range []string{"Content-Security-Policy", "X-Content-Type-Options", "ETag", "Cache-Control"} {
			if res.Header.Get(k) == "" {
				t.Errorf("GET %s: no %s header", tc.path, k)
			}
		}
	}
}

func TestHandlerRevalidatesWithETag(t *testing.T) {
	h := dashboard.Handler()
	etag := get(t, h, http.MethodGet, "/dashboard/dashboard.js").Header.Get("ETag")
	if res := get(t, h, http.MethodGet, "/dashboard/dashboard.js", "If-None-Match", etag); res.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match %s: status %d, want 304", etag, res.StatusCode)
	}
}

func TestHandlerRefuses(t *testing.T) {
	h := dashboard.Handler()
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/dashboard/nope.js", http.StatusNotFound},
		{http.MethodGet, "/dashboard/index.html", http.StatusNotFound}, // the page is at /dashboard/ only
		{http.MethodGet, "/dashboard/static/dashboard.js", http.StatusNotFound},
		{http.MethodPost, "/dashboard/", http.StatusMethodNotAllowed},
		{http.MethodGet, "/dashboard", http.StatusMovedPermanently},
	} {
		if res := get(t, h, tc.method, tc.path); res.StatusCode != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, res.StatusCode, tc.status)
		}
	}
	if res := get(t, h, http.MethodHead, "/dashboard/"); res.StatusCode != http.StatusOK {
		t.Errorf("HEAD /dashboard/: status %d", res.StatusCode)
	}
}

// The page must not pull anything from another origin or run inline script
// (the Content-Security-Policy forbids both).
func TestPageIsSelfContained(t *testing.T) {
	h := dashboard.Handler()
	for _, p := range []string{"/dashboard/", "/dashboard/dashboard.js", "/dashboard/read.js", "/dashboard/format.js", "/dashboard/draw.js", "/dashboard/dashboard.css"} {
		body, _ := io.ReadAll(get(t, h, http.MethodGet, p).Body)
		s := string(body)
		for _, bad := range []string{"http://", "https://", "//cdn", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
			if strings.Contains(s, bad) && !(bad == "http://" && strings.Contains(s, "http://www.w3.org/2000/svg")) {
				t.Errorf("%s contains %q", p, bad)
			}
		}
		if p == "/dashboard/" && strings.Contains(s, "<script>") {
			t.Errorf("%s has an inline script", p)
		}
	}
}
