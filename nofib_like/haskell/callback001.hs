-- callback001: T C pthreads (haskell/callback001_stubs.c, started from a
-- `foreign import ccall safe` call) each call the foreign-exported
-- capstan_bench_incall (2i+1) n times, all at once; the safe call joins them.
-- Metric: ns_per_incall = elapsed / (T*n), from before the first
-- pthread_create to after the last join.  Check: the sum is T * n^2.
-- Haskell twin of nofib_like/callback001.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad (when)
import Data.Word (Word64)
import Foreign.Marshal.Alloc (alloca)
import Foreign.Ptr (Ptr)
import Foreign.Storable (peek)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

foreign export ccall "capstan_bench_incall" incall :: Int -> IO Int
foreign import ccall safe "capstan_bench_callback001"
  callback001 :: Int -> Int -> Ptr Word64 -> IO Int

incall :: Int -> IO Int
incall i = return (2 * i + 1)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 10000
      threads = case args of (_ : t : _) -> read t; _ -> 4
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO $ alloca $ \p -> do       -- as the other twins: an unbound thread
    s <- callback001 threads n p
    e <- peek p
    putMVar r (s, e)
  (s, e) <- takeMVar r
  let ns = fromIntegral e / fromIntegral (threads * n) :: Double
      ok = s == threads * n * n
  printf "capstan-bench name=callback001 impl=ghc caps=%d n=%d ns_per_incall=%.1f check=%s\n"
    caps n ns (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
