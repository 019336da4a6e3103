{-# LANGUAGE BangPatterns #-}
-- switch: two threads on ONE capability each call 'yield' n times.
-- Metric: ns_per_switch = elapsed_ns / (2n).  Haskell twin of nofib_like/switch.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad (when)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

-- | Yield n times; returns the number of completed iterations.
yieldLoop :: Int -> IO Int
yieldLoop n = go 0
  where
    go !i | i >= n    = return i
          | otherwise = yield >> go (i + 1)

body :: Int -> IO (Double, Bool)
body n = do
  go <- newEmptyMVar
  d1 <- newEmptyMVar
  d2 <- newEmptyMVar
  -- Both threads wait for 'go' so neither runs alone before the other exists.
  _ <- forkOn 0 (readMVar go >> yieldLoop n >>= putMVar d1)
  _ <- forkOn 0 (readMVar go >> yieldLoop n >>= putMVar d2)
  t0 <- getMonotonicTimeNSec
  putMVar go ()
  c1 <- takeMVar d1
  c2 <- takeMVar d2
  t1 <- getMonotonicTimeNSec
  let ns = fromIntegral (t1 - t0) / fromIntegral (2 * n) :: Double
  return (ns, c1 == n && c2 == n)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 10000000
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n >>= putMVar r)   -- timed body runs in an unbound thread
  (ns, ok) <- takeMVar r
  printf "capstan-bench name=switch impl=ghc caps=%d n=%d ns_per_switch=%.2f check=%s\n"
    caps n ns (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
