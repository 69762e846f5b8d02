//go:build cgo

package main

// #include <time.h>
// static long long libc_now(void) {
//     struct timespec ts;
//     clock_gettime(CLOCK_REALTIME, &ts);
//     return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
// }
import "C"

func init() { libcNow = func() int64 { return int64(C.libc_now()) } }
