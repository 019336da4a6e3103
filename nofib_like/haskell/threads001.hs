{-# LANGUAGE BangPatterns #-}
-- threads001: fork n threads that finish at once; each decrements a shared
-- counter and the last one signals 'done'.  Metrics: ns_per_thread =
-- elapsed_ns / n, rss_kb = peak RSS (VmHWM).  Check: all n ran.
-- Haskell twin of nofib_like/threads001.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad (when)
import Data.IORef
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

-- | A field of /proc/self/status in KiB, e.g. "VmHWM".
procStatusKb :: String -> IO Int
procStatusKb key = do
  s <- readFile "/proc/self/status"
  case [ read (head (words (drop 1 rest))) | l <- lines s
                                  , let (k, rest) = break (== ':') l
                                  , k == key ] of
    (v : _) -> length s `seq` return v
    []      -> return 0

body :: Int -> IO (Double, Bool)
body n = do
  left <- newIORef n
  done <- newEmptyMVar
  let worker = do
        r <- atomicModifyIORef' left (\x -> (x - 1, x - 1))
        when (r == 0) (putMVar done ())
      spawn !i = when (i < n) (forkIO worker >> spawn (i + 1))
  t0 <- getMonotonicTimeNSec
  spawn 0
  when (n > 0) (takeMVar done)
  t1 <- getMonotonicTimeNSec
  remaining <- readIORef left        -- 0 iff all n threads ran
  return (fromIntegral (t1 - t0) / fromIntegral (max 1 n), remaining == 0)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 1000000
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n >>= putMVar r)   -- timed body runs in an unbound thread
  (ns, ok) <- takeMVar r
  hwm <- procStatusKb "VmHWM"
  printf "capstan-bench name=threads001 impl=ghc caps=%d n=%d ns_per_thread=%.2f rss_kb=%d check=%s\n"
    caps n ns hwm (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
