package oracle

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fencecheck/fencecheck/history"
)

// ev builds history lines tersely: each spec is
// "PROCESS TYPE F KEY [field=value ...]" with times taken from the order
// (line i at time 10*i) unless t= is given.
func hist(specs ...string) []byte {
	var b strings.Builder
	for i, s := range specs {
		fs := strings.Fields(s)
		fields := []string{fmt.Sprintf(`"index":%d`, i), fmt.Sprintf(`"process":%s`, fs[0]),
			fmt.Sprintf(`"type":%q`, fs[1]), fmt.Sprintf(`"f":%q`, fs[2])}
		time := fmt.Sprintf(`"time":%d`, 10*(i+1))
		if len(fs) > 3 && fs[3] != "-" {
			fields = append(fields, fmt.Sprintf(`"key":%q`, fs[3]))
		}
		for _, kv := range fs[min(4, len(fs)):] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "t":
				time = `"time":` + v
			case "extra":
				fields = append(fields, `"extra":`+v)
			default:
				fields = append(fields, fmt.Sprintf("%q:%q", k, v))
			}
		}
		b.WriteString("{" + strings.Join(append(fields, time), ",") + "}\n")
	}
	return []byte(b.String())
}

var (
	strict = Semantics{}
	accept = Semantics{EqualAccept: true}
	auth   = Semantics{Authenticated: true}
	global = Semantics{GlobalScope: true}
)

func TestRules(t *testing.T) {
	cases := []struct {
		name string
		sem  Semantics
		h    []byte
		want Verdict
	}{
		{"write then read its value", strict, hist(
			"0 invoke write k token=1 value=a", "0 ok write k token=1 value=a",
			"1 invoke read k", "1 ok read k token=1 value=a"), Valid},
		{"read of a never-written key is 404", strict, hist("1 invoke read k", "1 ok read k"), Valid},
		{"a 404 after a write", strict, hist(
			"0 invoke write k token=1 value=a", "0 ok write k token=1 value=a",
			"1 invoke read k", "1 ok read k"), Invalid},
		{"empty body with a token, never written", strict, hist("1 invoke read k", "1 ok read k token=1"), Invalid},
		{"empty body with a token, empty value written", strict, hist(
			"0 invoke write k token=1", "0 ok write k token=1",
			"1 invoke read k", "1 ok read k token=1"), Valid},
		{"empty value written, read as 404", strict, hist(
			"0 invoke write k token=1", "0 ok write k token=1",
			"1 invoke read k", "1 ok read k"), Invalid},
		{"a value with no token", strict, hist(
			"0 invoke write k token=1 value=a", "0 ok write k token=1 value=a",
			"1 invoke read k", "1 ok read k value=a"), Invalid},
		{"read token differs from the value's", strict, hist(
			"0 invoke write k token=1 value=a", "0 ok write k token=1 value=a",
			"1 invoke read k", "1 ok read k token=2 value=a"), Invalid},
		{"read compares numbers, not seals", strict, hist(
			"0 invoke write k token=1.x value=a", "0 ok write k token=1.x value=a",
			"1 invoke read k", "1 ok read k token=1.y value=a"), Valid},
		{"replay accepted (strict)", strict, hist(
			"0 invoke write k token=1 value=a", "0 ok write k token=1 value=a",
			"0 invoke write k token=1 value=b", "0 ok write k token=1 value=b"), Invalid},
		{"replay accepted (equal: accept)", accept, hist(
			"0 invoke write k token=1 value=a", "0 ok write k token=1 value=a",
			"0 invoke write k token=1 value=b", "0 ok write k token=1 value=b"), Valid},
		{"stale accepted", accept, hist(
			"0 invoke write k token=2 value=a", "0 ok write k token=2 value=a",
			"0 invoke write k token=1 value=b", "0 ok write k token=1 value=b"), Invalid},
		{"stale rejected with the mark", strict, hist(
			"0 invoke write k token=2 value=a", "0 ok write k token=2 value=a",
			"0 invoke write k token=1 value=b", "0 fail write k token=1 value=b error=stale high_water=2"), Valid},
		{"stale rejected, no mark reported", strict, hist(
			"0 invoke write k token=2 value=a", "0 ok write k token=2 value=a",
			"0 invoke write k token=1 value=b", "0 fail write k token=1 value=b error=stale"), Valid},
		{"stale rejection's mark below the token", strict, hist(
			"0 invoke write k token=2 value=a", "0 ok write k token=2 value=a",
			"0 invoke write k token=2 value=b", "0 fail write k token=2 value=b error=stale high_water=1"), Invalid},
		{"stale rejection's mark above the real one", strict, hist(
			"0 invoke write k token=2 value=a", "0 ok write k token=2 value=a",
			"0 invoke write k token=1 value=b", "0 fail write k token=1 value=b error=stale high_water=3"), Invalid},
		{"stale rejection's mark with a seal", strict, hist(
			"0 invoke write k token=2 value=a", "0 ok write k token=2 value=a",
			"0 invoke write k token=1 value=b", "0 fail write k token=1 value=b error=stale high_water=2.x"), Invalid},
		{"replay rejected (strict)", strict, hist(
			"0 invoke write k token=2 value=a", "0 ok write k token=2 value=a",
			"0 invoke write k token=2 value=b", "0 fail write k token=2 value=b error=stale high_water=2"), Valid},
		{"replay rejected as stale (equal: accept)", accept, hist(
			"0 invoke write k token=2 value=a", "0 ok write k token=2 value=a",
			"0 invoke write k token=2 value=b", "0 fail write k token=2 value=b error=stale high_water=2"), Invalid},
		{"false stale: newer token", strict, hist(
			"0 invoke write k token=1 value=a", "0 ok write k token=1 value=a",
			"0 invoke write k token=2 value=b", "0 fail write k token=2 value=b error=stale high_water=1"), Invalid},
		{"false stale: never written", strict, hist(
			"0 invoke write k token=2 value=b", "0 fail write k token=2 value=b error=stale"), Invalid},
		{"other rejections claim nothing", strict, hist(
			"0 invoke write k token=2 value=b", "0 fail write k token=2 value=b error=refused"), Valid},
		{"missing token accepted", strict, hist("0 invoke write k value=a", "0 ok write k value=a"), Invalid},
		{"missing token rejected", strict, hist("0 invoke write k value=a", "0 fail write k value=a error=missing-token"), Valid},
		{"leading zero accepted", strict, hist("0 invoke write k token=01 value=a", "0 ok write k token=01 value=a"), Invalid},
		{"empty seal accepted", strict, hist("0 invoke write k token=1. value=a", "0 ok write k token=1. value=a"), Invalid},
		{"seal outside the alphabet accepted", strict, hist("0 invoke write k token=1.a+b value=a", "0 ok write k token=1.a+b value=a"), Invalid},
		{"seal of 257 characters accepted", strict, hist("0 invoke write k token=1."+strings.Repeat("s", 257)+" value=a", "0 ok write k value=a"), Invalid},
		{"seal of 256 characters accepted", strict, hist("0 invoke write k token=1."+strings.Repeat("s", 256)+" value=a", "0 ok write k value=a"), Valid},
		{"number above uint64 accepted", strict, hist("0 invoke write k token=18446744073709551616 value=a", "0 ok write k value=a"), Invalid},
		{"largest uint64 accepted", strict, hist("0 invoke write k token=18446744073709551615 value=a", "0 ok write k value=a"), Valid},
		{"token 0 on a never-written key", strict, hist("0 invoke write k token=0 value=a", "0 ok write k value=a"), Valid},
		{"malformed rejected as stale claims nothing", strict, hist(
			"0 invoke write k token=01 value=a", "0 fail write k token=01 value=a error=stale high_water=0"), Valid},
		{"authenticated: unsealed accepted", auth, hist(
			"0 invoke acquire k", "0 ok acquire k token=1",
			"0 invoke write k token=1 value=a", "0 ok write k token=1 value=a"), Invalid},
		{"authenticated: unsealed rejected as stale claims nothing", auth, hist(
			"0 invoke write k token=5 value=a", "0 fail write k token=5 value=a error=stale high_water=3"), Valid},
		{"authenticated: issued token accepted", auth, hist(
			"0 invoke acquire k", "0 ok acquire k token=1.s",
			"0 invoke write k token=1.s value=a", "0 ok write k token=1.s value=a"), Valid},
		{"authenticated: never-issued token accepted", auth, hist(
			"0 invoke acquire k", "0 ok acquire k token=1.s",
			"0 invoke write k token=7.s value=a", "0 ok write k token=7.s value=a"), Invalid},
		{"authenticated: token of a lost acquire answer accepted", auth, hist(
			"0 invoke acquire k", "0 info acquire k",
			"1 invoke write k token=7.s value=a", "1 ok write k token=7.s value=a"), Valid},
		{"authenticated: a spelling some acquire returned is authentic (the lead's rule: no time order)", auth, hist(
			"1 invoke write k token=7.s value=a", "0 invoke acquire k", "0 ok acquire k token=7.s",
			"1 ok write k token=7.s value=a"), Valid},
		{"authenticated: lost acquire answer after the write was sent", auth, hist(
			"1 invoke write k token=7.s value=a", "0 invoke acquire k", "0 info acquire k",
			"1 ok write k token=7.s value=a"), Invalid},
		{"authenticated: no acquire in the history, tokens cannot be judged", auth, hist(
			"1 invoke write k token=7.s value=a", "1 ok write k token=7.s value=a"), Valid},
		{"authenticated: no acquire in the history, unsealed still rejected", auth, hist(
			"1 invoke write k token=7 value=a", "1 ok write k token=7 value=a"), Invalid},
		{"authenticated: the exact spelling counts, not only the number", auth, hist(
			"0 invoke acquire k", "0 ok acquire k token=7.s",
			"1 invoke write k token=7.other value=a", "1 ok write k token=7.other value=a"), Invalid},
		{"authenticated: tokens of another lock are authentic", auth, hist(
			"0 invoke acquire j", "0 ok acquire j token=7.s",
			"1 invoke write k token=7.s value=a", "1 ok write k token=7.s value=a"), Valid},
		{"authenticated: forged token rejected as stale claims nothing", auth, hist(
			"0 invoke acquire k", "0 ok acquire k token=1.s", "1 invoke write k token=7.s value=a", "1 fail write k token=7.s value=a error=stale high_water=9"), Valid},
		{"unauthenticated: never-issued token accepted is no violation", strict, hist(
			"0 invoke write k token=7.s value=a", "0 ok write k token=7.s value=a"), Valid},
		{"info write seen later", strict, hist(
			"0 invoke write k token=1 value=a", "0 info write k token=1 value=a",
			"1 invoke read k", "1 ok read k", "1 invoke read k", "1 ok read k token=1 value=a"), Valid},
		{"info write seen, then not", strict, hist(
			"0 invoke write k token=1 value=a", "0 info write k token=1 value=a",
			"1 invoke read k", "1 ok read k token=1 value=a", "1 invoke read k", "1 ok read k"), Invalid},
		{"info write with a stale token seen", strict, hist(
			"0 invoke write k token=2 value=a", "0 ok write k token=2 value=a",
			"1 invoke write k token=1 value=b", "1 info write k token=1 value=b",
			"2 invoke read k", "2 ok read k token=1 value=b"), Invalid},
		{"never-completed write seen", strict, hist(
			"0 invoke write k token=1 value=a", "1 invoke read k", "1 ok read k token=1 value=a"), Valid},
		{"rejected write seen", strict, hist(
			"0 invoke write k token=2 value=a", "0 ok write k token=2 value=a",
			"0 invoke write k token=1 value=b", "0 fail write k token=1 value=b error=stale high_water=2",
			"1 invoke read k", "1 ok read k token=1 value=b"), Invalid},
		{"concurrent writes, read after both sees the older token", strict, hist(
			"0 invoke write k token=1 value=a", "1 invoke write k token=2 value=b",
			"0 ok write k token=1 value=a", "1 ok write k token=2 value=b",
			"2 invoke read k", "2 ok read k token=1 value=a"), Invalid},
		{"concurrent writes, read during them", strict, hist(
			"0 invoke write k token=1 value=a", "1 invoke write k token=2 value=b", "2 invoke read k",
			"2 ok read k token=1 value=a", "0 ok write k token=1 value=a", "1 ok write k token=2 value=b"), Valid},
		{"concurrent writes both accepted out of order", strict, hist(
			"0 invoke write k token=2 value=a", "1 invoke write k token=1 value=b",
			"0 ok write k token=2 value=a", "1 ok write k token=1 value=b"), Valid},
		{"stripped token accepted", strict, hist(
			"0 invoke write k token=1 value=a", `-1 info strip k value=a extra={"mode":"remove"}`,
			"0 ok write k token=1 value=a"), Invalid},
		{"stripped token rejected", strict, hist(
			"0 invoke write k token=1 value=a", `-1 info strip k value=a extra={"mode":"remove"}`,
			"0 fail write k token=1 value=a error=missing-token"), Valid},
		{"strip events match the key, not only the value", strict, hist(
			"0 invoke write a token=1 value=v", "1 invoke write b token=1 value=v",
			`-1 info strip b value=v extra={"mode":"remove"}`,
			"0 ok write a token=1 value=v", "1 fail write b token=1 value=v error=missing-token"), Valid},
		{"strip start and stop are not tampering", strict, hist(
			`-1 info strip - extra={"action":"start"}`,
			"0 invoke write k token=1 value=a", "0 ok write k token=1 value=a"), Valid},
		{"token and value only on the completion", strict, hist(
			"0 invoke write k", "0 ok write k token=1 value=a",
			"1 invoke read k", "1 ok read k token=1 value=a"), Valid},
		{"increasing tokens", strict, hist(
			"0 invoke acquire l", "0 ok acquire l token=1", "1 invoke acquire l", "1 ok acquire l token=2"), Valid},
		{"token regression", strict, hist(
			"0 invoke acquire l", "0 ok acquire l token=2", "1 invoke acquire l", "1 ok acquire l token=1"), Invalid},
		{"concurrent acquires, same token", strict, hist(
			"0 invoke acquire l", "1 invoke acquire l", "0 ok acquire l token=1", "1 ok acquire l token=1"), Invalid},
		{"concurrent acquires, either order", strict, hist(
			"0 invoke acquire l", "1 invoke acquire l", "0 ok acquire l token=2", "1 ok acquire l token=1"), Valid},
		{"per-lock tokens may repeat across locks", strict, hist(
			"0 invoke acquire a", "0 ok acquire a token=1", "1 invoke acquire b", "1 ok acquire b token=1"), Valid},
		{"global tokens may not", global, hist(
			"0 invoke acquire a", "0 ok acquire a token=1", "1 invoke acquire b", "1 ok acquire b token=1"), Invalid},
		{"acquire with a leading zero", strict, hist("0 invoke acquire l", "0 ok acquire l token=01"), Invalid},
		{"acquire with a bad seal", strict, hist("0 invoke acquire l", "0 ok acquire l token=1.b@d"), Invalid},
		{"acquire ok without a token", strict, hist("0 invoke acquire l", "0 ok acquire l"), Invalid},
		{"renew and release of the holder", strict, hist(
			"0 invoke acquire l", "0 ok acquire l token=3", "0 invoke renew l token=3", "0 ok renew l token=3",
			"0 invoke release l token=3", "0 ok release l token=3"), Valid},
		{"release of a lock never acquired (renew and release are not judged)", strict, hist("0 invoke release l token=1", "0 ok release l token=1"), Valid},
		{"renew after release (renew and release are not judged)", strict, hist(
			"0 invoke acquire l", "0 ok acquire l token=3", "0 invoke release l token=3", "0 ok release l token=3",
			"0 invoke renew l token=3", "0 ok renew l token=3"), Valid},
		{"renew with the old token after a new grant (renew and release are not judged)", strict, hist(
			"0 invoke acquire l", "0 ok acquire l token=3", "1 invoke acquire l", "1 ok acquire l token=4",
			"0 invoke renew l token=3", "0 ok renew l token=3"), Valid},
		{"release after a lost acquire answer, token guessed", strict, hist(
			"0 invoke acquire l", "0 ok acquire l token=1", "1 invoke acquire l", "1 info acquire l",
			"2 invoke release l token=5", "2 ok release l token=5", "3 invoke acquire l", "3 ok acquire l token=6"), Valid},
		{"the lost acquire's token is above what came before (renew and release are not judged)", strict, hist(
			"0 invoke acquire l", "0 ok acquire l token=5", "1 invoke acquire l", "1 info acquire l",
			"2 invoke release l token=4", "2 ok release l token=4"), Valid},
		{"authenticated: unsealed renew accepted (renew and release are not judged)", auth, hist(
			"0 invoke acquire l", "0 ok acquire l token=3", "0 invoke renew l token=3", "0 ok renew l token=3"), Valid},
		{"failed renews and releases claim nothing", strict, hist(
			"0 invoke renew l token=3", "0 fail renew l token=3 error=lost"), Valid},
	}
	for _, c := range cases {
		res, err := Check(c.h, c.sem)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if res.Verdict != c.want {
			t.Errorf("%s: %v, want %s\n%s", c.name, res, c.want, c.h)
		}
	}
}

func TestInputErrors(t *testing.T) {
	ok := `{"index":0,"time":10,"process":0,"type":"invoke","f":"read","key":"k"}` + "\n"
	cases := []struct {
		name, h string
		line    int
		msg     string
	}{
		{"completion before invoke", ok + `{"index":1,"time":5,"process":0,"type":"ok","f":"read","key":"k"}`, 2, "before its invoke"},
		{"duplicate index", ok + `{"index":0,"time":20,"process":0,"type":"ok","f":"read","key":"k"}`, 2, "duplicate index 0"},
		{"missing index", `{"time":10,"process":0,"type":"invoke","f":"read","key":"k"}`, 1, `missing "index"`},
		{"missing process", `{"index":0,"time":10,"type":"invoke","f":"read","key":"k"}`, 1, `missing "process"`},
		{"missing type", `{"index":0,"time":10,"process":0,"f":"read","key":"k"}`, 1, `missing "type"`},
		{"missing time", `{"index":0,"process":0,"type":"invoke","f":"read","key":"k"}`, 1, `missing "time"`},
		{"unknown f", ok + `{"index":1,"time":20,"process":1,"type":"invoke","f":"wirte","key":"k"}`, 2, `"wirte" is not a client operation`},
		{"bad type", `{"index":0,"time":10,"process":0,"type":"okay","f":"read","key":"k"}`, 1, `type "okay"`},
		{"token as a number", `{"index":0,"time":10,"process":0,"type":"invoke","f":"write","key":"k","token":5}`, 1, `"token" must be a string`},
		{"fractional index", `{"index":0.5,"time":10,"process":0,"type":"invoke","f":"read","key":"k"}`, 1, "integer"},
		{"not JSON", ok + "nope\n" + ok, 2, "not a JSON object"},
		{"not an object", "[1]\n", 1, "not a JSON object"},
		{"null", "null\n", 1, "not a JSON object"},
		{"BOM inside", ok + "\xef\xbb\xbf" + ok, 2, "not a JSON object"},
		{"no open operation", `{"index":0,"time":10,"process":0,"type":"ok","f":"read","key":"k"}`, 1, "no open operation"},
		{"completion of another op", ok + `{"index":1,"time":20,"process":0,"type":"ok","f":"write","key":"k"}`, 2, "its open operation"},
		{"invoke while open", ok + `{"index":1,"time":20,"process":0,"type":"invoke","f":"read","key":"k"}`, 2, "still open"},
		{"retired process reused", ok + `{"index":1,"time":20,"process":0,"type":"info","f":"read","key":"k"}` + "\n" +
			`{"index":2,"time":30,"process":0,"type":"invoke","f":"read","key":"k"}`, 3, "retired"},
		{"client op on the nemesis process", `{"index":0,"time":10,"process":-1,"type":"invoke","f":"write","key":"k"}`, 1, "process -1"},
		{"no key", `{"index":0,"time":10,"process":0,"type":"invoke","f":"read"}`, 1, "without a key"},
		{"token differs on the completion", `{"index":0,"time":10,"process":0,"type":"invoke","f":"write","key":"k","token":"1"}` + "\n" +
			`{"index":1,"time":20,"process":0,"type":"ok","f":"write","key":"k","token":"2"}`, 2, "differs"},
		{"strip event of no write", `{"index":0,"time":10,"process":-1,"type":"info","f":"strip","key":"k","value":"v"}`, 1, "matches no write"},
		{"strip event without a key", `{"index":0,"time":10,"process":0,"type":"invoke","f":"write","key":"k","token":"1","value":"v"}` + "\n" +
			`{"index":1,"time":20,"process":-1,"type":"info","f":"strip","value":"v"}`, 2, "without a key"},
	}
	for _, c := range cases {
		_, err := Check([]byte(c.h), strict)
		var ie *InputError
		if !errors.As(err, &ie) {
			t.Errorf("%s: err %v, want an input error on line %d", c.name, err, c.line)
			continue
		}
		if ie.Line != c.line || !strings.Contains(ie.Msg, c.msg) {
			t.Errorf("%s: %v, want line %d with %q", c.name, ie, c.line, c.msg)
		}
	}
}

func TestReadsWhatTheRecorderMayWrite(t *testing.T) {
	for name, h := range map[string]string{
		"BOM":                "\xef\xbb\xbf" + `{"index":0,"time":10,"process":0,"type":"invoke","f":"read","key":"k"}`,
		"CRLF":               `{"index":0,"time":10,"process":0,"type":"invoke","f":"read","key":"k"}` + "\r\n",
		"blank lines":        "\n  \n" + `{"index":0,"time":10,"process":0,"type":"invoke","f":"read","key":"k"}` + "\n\n",
		"truncated last":     `{"index":0,"time":10,"process":0,"type":"invoke","f":"read","key":"k"}` + "\n" + `{"index":1,"ti`,
		"unknown fields":     `{"index":0,"time":10,"process":0,"type":"invoke","f":"read","key":"k","node":"n1","extra":{"x":1},"future":[1]}`,
		"nemesis any f/type": `{"index":0,"time":10,"process":-1,"type":"whatever","f":"pause"}`,
		"null fields":        `{"index":0,"time":10,"process":0,"type":"invoke","f":"read","key":"k","token":null,"value":null}`,
	} {
		if _, err := Check([]byte(h), strict); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The bound is enforced, and a history at the bound is decided quickly
// even when every operation overlaps every other.
func TestBound(t *testing.T) {
	var specs []string
	for p := 0; p < MaxOps; p++ {
		specs = append(specs, fmt.Sprintf("%d invoke write k token=%d value=v%d", p, p%5+1, p))
	}
	for p := 0; p < MaxOps; p++ {
		specs = append(specs, fmt.Sprintf("%d info write k token=%d value=v%d", p, p%5+1, p))
	}
	res, err := Check(hist(specs...), strict)
	if err != nil || res.Verdict != Valid {
		t.Fatalf("%d overlapping info writes: %v %v", MaxOps, res, err)
	}
	// The worst case: nothing linearizes, so every order is tried.
	res, err = Check(worstCase(), strict)
	if err != nil || res.Verdict != Invalid {
		t.Fatalf("worst case: %v %v", res, err)
	}
	specs = append([]string{"99 invoke read k", "99 ok read k"}, specs...)
	res, err = Check(hist(specs...), strict)
	if err != nil || res.Verdict != TooBig {
		t.Fatalf("%d operations: %v %v, want %s", MaxOps+1, res, err, TooBig)
	}
}

// BenchmarkWorstCase: MaxOps overlapping operations of which none fits.
func BenchmarkWorstCase(b *testing.B) {
	h := worstCase()
	for b.Loop() {
		if res, _ := Check(h, strict); res.Verdict != Invalid {
			b.Fatal(res)
		}
	}
}

// worstCase is MaxOps overlapping operations: info writes and a read of a
// value none of them wrote.
func worstCase() []byte {
	specs := []string{"99 invoke read k"}
	for p := 1; p < MaxOps; p++ {
		specs = append(specs, fmt.Sprintf("%d invoke write k token=%d value=v%d", p, p%5+1, p))
	}
	for p := 1; p < MaxOps; p++ {
		specs = append(specs, fmt.Sprintf("%d info write k token=%d value=v%d", p, p%5+1, p))
	}
	return hist(append(specs, "99 ok read k token=9 value=nobody")...)
}

// The oracle's token grammar, written from PROTOCOL.md, and the project's
// one grammar (history.ParseToken) read every string alike.
func TestTokenGrammarMatchesHistory(t *testing.T) {
	cases := []string{"", "0", "1", "42", "01", "00", "-1", "+1", " 1", "1 ", "1.", ".1", "1.a", "1.A-_z9", "1.a+b",
		"1.a.b", "1..", "18446744073709551615", "18446744073709551616", "99999999999999999999", "123456789012345678901",
		"1." + strings.Repeat("a", 256), "1." + strings.Repeat("a", 257), "１", "1.é", "0x1", "1e3", "1\x00"}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "0123456789.-_aZ+ "
	for i := 0; i < 20000; i++ {
		b := make([]byte, rng.IntN(8))
		for j := range b {
			b[j] = alphabet[rng.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		mine, theirs := parseToken(s), history.ParseToken(s)
		wantState := map[tokenKind]history.TokenState{tokMissing: history.TokenNone, tokValid: history.TokenValid, tokMalformed: history.TokenMalformed}[mine.kind]
		if theirs.State != wantState || (mine.kind == tokValid && (theirs.N != mine.n || (theirs.Seal != "") != mine.sealed)) {
			t.Errorf("%q: oracle %+v, history.ParseToken %+v", s, mine, theirs)
		}
	}
}
