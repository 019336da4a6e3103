-- idle: the runtime has nothing to run for n seconds (the body sleeps in
-- threadDelay).  Metric: cpu_percent = 100 * process CPU time (user+sys)
-- during the window / wall time of the window.  Check: always ok.
-- Haskell twin of nofib_like/idle.cpp.
module Main (main) where

import Control.Concurrent
import GHC.Clock (getMonotonicTimeNSec)
import System.CPUTime (getCPUTime)
import System.Environment (getArgs)
import Text.Printf (printf)

body :: Int -> IO Double
body n = do
  w0 <- getMonotonicTimeNSec
  c0 <- getCPUTime                      -- picoseconds, whole process
  threadDelay (n * 1000000)
  c1 <- getCPUTime
  w1 <- getMonotonicTimeNSec
  let cpuNs  = fromIntegral (c1 - c0) / 1000 :: Double
      wallNs = fromIntegral (w1 - w0) :: Double
  return (100 * cpuNs / wallNs)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 5
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n >>= putMVar r)   -- timed body runs in an unbound thread
  pct <- takeMVar r
  printf "capstan-bench name=idle impl=ghc caps=%d n=%d cpu_percent=%.3f check=ok\n"
    caps n pct
