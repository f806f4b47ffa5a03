// Package dashboard serves the lease server's web dashboard: one HTML page,
// a style sheet and its scripts (dashboard.js, an ES module importing
// read.js and format.js, and draw.js), every file of static/ embedded in
// the binary. The page reads the server's JSON API (/v1/...) from the
// browser; this package serves only the static files and knows nothing of
// the server.
package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// Prefix is where the server mounts the dashboard. Handler strips it when
// a request's path starts with it, so the handler can be mounted with or
// without http.StripPrefix.
const Prefix = "/dashboard/"

type file struct {
	body  []byte
	ctype string
	etag  string
}

var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// securityHeaders keep the page to its own files and the server's API:
// no inline script, no third-party origin, no framing.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; " +
		"img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"X-Frame-Options":        "DENY",
}

func load() map[string]file {
	files := map[string]file{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		ctype, ok := contentTypes[path.Ext(p)]
		if !ok {
			ctype = http.DetectContentType(body)
		}
		sum := sha256.Sum256(body)
		files[strings.TrimPrefix(p, "static")] = file{
			body:  body,
			ctype: ctype,
			etag:  `"` + hex.EncodeToString(sum[:8]) + `"`,
		}
		return nil
	})
	if err != nil {
		panic("dashboard: embedded files: " + err.Error())
	}
	files["/"] = files["/index.html"]
	delete(files, "/index.html")
	return files
}

// Handler serves the dashboard's files: the page at "/" (or Prefix), its
// style sheet and script beside it. Mount it at /dashboard/ on the same
// origin as the /v1/ API; the page finds the API relative to its own path,
// so a reverse proxy may put both under a common prefix.
func Handler() http.Handler {
	files := load()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if strings.HasPrefix(p, Prefix) {
			p = p[len(Prefix)-1:]
		} else if p == strings.TrimSuffix(Prefix, "/") {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		if p == "" {
			p = "/"
		}
		f, ok := files[p]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		for k, v := range securityHeaders {
			h.Set(k, v)
		}
		h.Set("Content-Type", f.ctype)
		h.Set("ETag", f.etag)
		// Revalidate every time: the files change with the binary.
		h.Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
	})
}
