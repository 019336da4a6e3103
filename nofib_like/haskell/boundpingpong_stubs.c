/* boundpingpong_stubs.c - which OS thread is this?  For haskell/boundpingpong.hs
 * (unsafe calls: they run on the caller's OS thread and cost a few ns). */
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

unsigned long capstan_bench_os_self(void);
long capstan_bench_gettid(void);

unsigned long capstan_bench_os_self(void) { return (unsigned long)pthread_self(); }
long capstan_bench_gettid(void) { return syscall(SYS_gettid); }
