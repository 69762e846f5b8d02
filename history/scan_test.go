package history

import (
	"reflect"
	"testing"
)

var scanSamples = []string{
	`{"index":12,"time":120034000,"process":3,"type":"ok","f":"write","key":"r1","token":"42","value":"c3-17"}`,
	`{"index":0,"time":0,"process":-1,"type":"info","f":"partition","node":"n1","extra":{"action":"start","groups":[["n1"],["n2"]], "x" : {"a":[1,2.5e3,true,false,null]}}}`,
	` { "index" : 1 , "time":2,"process":0,"type":"invoke","f":"read","key":"k" } `,
	`{"index":1,"time":2,"process":0,"type":"invoke","f":"write","key":"k","value":"a\"b\\c\/d\b\f\n\r\t\u0001\u003c\u00e9\ud83d\ude00","token":"1.s"}`,
	`{"index":1,"time":2,"process":0,"type":"invoke","f":"write","key":"k","value":"\ud800"}`,
	`{"index":1,"time":2,"process":0,"type":"invoke","f":"write","key":"ké","value":"é€"}`,
	"{\"index\":1,\"time\":2,\"process\":0,\"type\":\"invoke\",\"f\":\"write\",\"key\":\"k\",\"value\":\"\xff\"}",
	`{"index":1,"time":2,"process":0,"type":"invoke","f":"read","key":"k","unknown":[1,{"a":"b"}],"high_water":"3","error":"stale"}`,
	`{"INDEX":1,"time":2,"process":0,"type":"invoke","f":"read","key":"k"}`,
	`{"index":1,"index":2,"time":2,"process":0,"type":"invoke","f":"read","key":"k"}`,
	`{"index":1.5,"time":2,"process":0,"type":"invoke","f":"read","key":"k"}`,
	`{"index":1e3,"time":2,"process":0,"type":"invoke","f":"read","key":"k"}`,
	`{"index":-0,"time":2,"process":0,"type":"invoke","f":"read","key":"k"}`,
	`{"index":01,"time":2,"process":0,"type":"invoke","f":"read","key":"k"}`,
	`{"index":9223372036854775807,"time":-9223372036854775808,"process":0,"type":"invoke","f":"read","key":"k"}`,
	`{"index":9223372036854775808,"time":2,"process":0,"type":"invoke","f":"read","key":"k"}`,
	`{"index":null,"time":2,"process":0,"type":"invoke","f":"read","key":"k"}`,
	`{"index":1,"time":2,"process":0,"type":null,"f":"read","key":"k"}`,
	`{"index":1,"time":2,"process":0,"type":"invoke","f":"read","key":null,"extra":null}`,
	`{"index":1,"time":2,"process":0,"type":"invoke","f":"read","key":"k","extra":{}}`,
	`{"index":1,"time":2,"process":0,"type":"invoke","f":"read","key":"k","extra":5}`,
	`{"index":1,"time":2,"process":0,"type":"invoke","f":"read","key":"k"} x`,
	`{"index":1,"time":2,"process":0,"type":"invoke","f":"read","key":"k"`,
	`{"index":1,"time":2,"process":0,"type":"invoke","f":"read","key":"k",}`,
	`{"index":"1","time":2,"process":0,"type":"invoke","f":"read","key":"k"}`,
	`{"index":1,"time":2,"process":0,"type":5,"f":"read","key":"k"}`,
	`{"time":2,"process":0,"type":"invoke","f":"read","key":"k"}`,
	`[1,2]`, `{}`, `null`, ``, `{"a\u0062":1}`,
	"{\"index\":1,\"time\":2,\"process\":0,\"type\":\"invoke\",\"f\":\"read\",\"key\":\"k\u0001\"}",
}

// The scanner and encoding/json read every line alike: the same event, or
// the scanner steps aside (and encoding/json decides).
func TestScanMatchesEncodingJSON(t *testing.T) {
	fast := 0
	for _, line := range scanSamples {
		if checkScan(t, []byte(line)) {
			fast++
		}
	}
	if fast < 8 {
		t.Errorf("the scanner read only %d of the samples itself", fast)
	}
}

func checkScan(t *testing.T, b []byte) bool {
	t.Helper()
	got, ok := scanEvent(b, map[string]string{})
	if !ok {
		return false
	}
	want, err := decodeEvent(b)
	if err != nil {
		t.Errorf("scanner read %q, encoding/json refuses it: %v", b, err)
		return true
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%q:\nscanner       %+v\nencoding/json %+v", b, got, want)
	}
	return true
}

func FuzzScanEvent(f *testing.F) {
	for _, s := range scanSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkScan(t, b) })
}

// fieldBit numbers the fields as fieldNames lists them.
func TestFieldBitFollowsFieldNames(t *testing.T) {
	for i, f := range fieldNames {
		if got := fieldBit([]byte(f)); got != 1<<i {
			t.Errorf("%s: %b, want %b", f, got, 1<<i)
		}
	}
	if fieldBit([]byte("Index")) != 0 {
		t.Error("fieldBit folds case")
	}
}
