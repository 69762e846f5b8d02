package reports

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"
)

//go:embed serve.tmpl.html
var serveTemplateText string

var serveTemplate = template.Must(template.New("serve").Parse(serveTemplateText))

// DefaultAddr is where `fencecheck serve` listens: loopback only, because
// a report holds whatever the system under test said and the store may hold
// node logs; exposing it is the user's explicit choice.
const DefaultAddr = "127.0.0.1:8080"

// contentTypes are the only file types served with their own type. Anything
// else (node logs, history.jsonl, files a target wrote) is served as plain
// text, so a log line that looks like HTML can never run in the browser.
var contentTypes = map[string]string{
	".html":  "text/html; charset=utf-8",
	".json":  "application/json",
	".xml":   "application/xml",
	".png":   "image/png",
	".svg":   "image/svg+xml",
	".jsonl": "text/plain; charset=utf-8",
}

// Server serves a run store: "/" lists the runs, "/runs/..." serves files.
type Server struct {
	store string
	root  *os.Root
	files http.Handler
	mux   *http.ServeMux
}

// NewServer serves the store folder. Files are served through os.Root, so no
// path (.., absolute, or a symlink pointing outside the store) can reach a
// file outside it.
func NewServer(store string) (*Server, error) {
	root, err := os.OpenRoot(store)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s := &Server{store: store, root: root, mux: http.NewServeMux()}
	s.files = http.StripPrefix("/runs", http.FileServerFS(root.FS()))
	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.HandleFunc("GET /runs/", s.serveFile)
	s.mux.HandleFunc("GET /favicon.ico", http.NotFound)
	return s, nil
}

// Close releases the store folder.
func (s *Server) Close() error { return s.root.Close() }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	// The pages are self-contained: nothing may be loaded from elsewhere.
	h.Set("Content-Security-Policy", "default-src 'self' 'unsafe-inline' data:; connect-src 'none'; form-action 'none'; frame-ancestors 'self'")
	s.mux.ServeHTTP(w, r)
}

func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, "/runs")
	// http.FileServerFS cleans the path too; refusing dot segments early
	// keeps the error plain and the intent visible.
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			http.Error(w, "bad path", http.StatusBadRequest)
			return
		}
	}
	if !strings.HasSuffix(p, "/") {
		ct, ok := contentTypes[strings.ToLower(path.Ext(p))]
		if !ok {
			ct = "text/plain; charset=utf-8"
		}
		w.Header().Set("Content-Type", ct)
	}
	s.files.ServeHTTP(w, r)
}

type serveRun struct {
	Run
	Date, Duration, Report, Dir string
	Links                       []serveLink
}

type serveLink struct{ Name, Href string }

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	runs, err := ListRuns(s.store)
	if err != nil {
		http.Error(w, "cannot list the store: "+err.Error(), http.StatusInternalServerError)
		return
	}
	counts := map[string]int{}
	var rows []serveRun
	for _, run := range runs {
		v := string(run.Verdict)
		switch {
		case v == "" && run.State == StateCouldNotRun:
			v = "could-not-run"
		case v == "":
			v = "none"
		}
		counts[v]++
		row := serveRun{Run: run, Date: run.Start.UTC().Format("2006-01-02 15:04:05"), Duration: formatDuration(run.Duration),
			Dir: "/runs/" + escapePath(run.Path) + "/"}
		if run.HasReport {
			row.Report = row.Dir + ReportFile
		}
		for _, f := range run.Files {
			if f == ReportFile {
				continue
			}
			row.Links = append(row.Links, serveLink{Name: f, Href: row.Dir + escapePath(f)})
		}
		rows = append(rows, row)
	}
	var buf bytes.Buffer
	err = serveTemplate.Execute(&buf, struct {
		Store                          string
		Runs                           []serveRun
		Generated                      string
		CSS                            template.CSS
		Valid, Invalid, Unknown, Other int
		CouldNotRun                    int
	}{Store: s.store, Runs: rows, Generated: time.Now().UTC().Format(time.RFC3339), CSS: template.CSS(reportCSS),
		Valid: counts["valid"], Invalid: counts["invalid"], Unknown: counts["unknown"], Other: counts["none"],
		CouldNotRun: counts["could-not-run"]})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// IsLoopback reports whether addr (host:port) listens on loopback only.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Timeouts of the report server: a client that sends its request slowly,
// never reads the answer, or holds a keep-alive connection idle is cut off,
// so held connections cannot pile up (each costs a goroutine and a file
// descriptor). Writes get long enough for a large history over a slow
// link.
const (
	ServeReadHeaderTimeout = 10 * time.Second
	ServeReadTimeout       = 30 * time.Second
	ServeWriteTimeout      = 5 * time.Minute
	ServeIdleTimeout       = 30 * time.Second
)

// NewHTTPServer is the http.Server `fencecheck serve` runs h with: every
// timeout set.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ServeReadHeaderTimeout, ReadTimeout: ServeReadTimeout,
		WriteTimeout: ServeWriteTimeout, IdleTimeout: ServeIdleTimeout, MaxHeaderBytes: 64 << 10}
}
