package reports
import ("testing";"os")
func TestZZ(t *testing.T){
 os.RemoveAll("/tmp/r10k")
 info, check := synthRun(t, "/tmp/r10k", 10000)
 if _, err := Write("/tmp/r10k", info, check); err != nil { t.Fatal(err) }
}
