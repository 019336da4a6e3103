/* ffi_nop.c - the trivial C function that safecall (C++) and its Haskell
 * twin both call, in its own translation unit so that neither compiler can
 * inline it, see that it is pure, or hoist it out of the timing loop. */
int capstan_bench_nop(int x);

int capstan_bench_nop(int x) { return x + 1; }
