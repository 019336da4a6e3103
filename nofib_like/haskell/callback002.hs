-- callback002: in-call latency from one foreign OS thread.  A pthread
-- (haskell/callback002_stubs.c, started from a `foreign import ccall safe`
-- call) does x = capstan_bench_succ(x) n times, a call into the
-- foreign-exported Haskell function each, then n round trips with a second
-- pthread through a mutex and two condition variables.
-- Metrics: callin_ns and condvar_ns = elapsed / n for each series;
-- ratio = callin_ns / condvar_ns.  Check: both chains end at x == n.
-- Haskell twin of nofib_like/callback002.cpp.
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

foreign export ccall "capstan_bench_succ" succIO :: Int -> IO Int
foreign import ccall safe "capstan_bench_callback002"
  callback002 :: Int -> Ptr Word64 -> Ptr Word64 -> IO Int

succIO :: Int -> IO Int
succIO x = return (x + 1)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 100000
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO $ alloca $ \pIn -> alloca $ \pCv -> do   -- an unbound thread, as the other twins
    good <- callback002 n pIn pCv
    tIn <- peek pIn
    tCv <- peek pCv
    putMVar r (good, tIn, tCv)
  (good, tIn, tCv) <- takeMVar r
  let callin = fromIntegral tIn / fromIntegral n :: Double
      condvar = fromIntegral tCv / fromIntegral n :: Double
      ok = good == 1
  printf "capstan-bench name=callback002 impl=ghc caps=%d n=%d ratio=%.3f callin_ns=%.1f condvar_ns=%.1f check=%s\n"
    caps n (callin / condvar) callin condvar (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
