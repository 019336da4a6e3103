{-# LANGUAGE BangPatterns #-}
-- overlap: at -N1, thread A makes n blocking calls of 200 ms each (a
-- `foreign import ccall safe` nanosleep, haskell/overlap_stubs.c) while
-- thread B computes in ~1 us work units and marks the 1 ms time bucket each
-- unit finished in.  Built with -fno-omit-yields so that B's non-allocating
-- loop still passes a safe point (a heap check) every unit, as the C++
-- program's yield_point().
-- return_latency_us: median over the calls of (A runs again after the call)
--   - (timestamp taken inside the C call right before returning).
-- overlap_percent: of the 1 ms buckets wholly inside the calls, the share
--   in which B finished at least one unit.
-- work_percent: B's units per ns during the calls / alone (200 ms before A).
-- Check: B's bucket counts add up to its units, and every call slept.
-- Haskell twin of nofib_like/overlap.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad (forM, when)
import Data.Array.IO (IOUArray, getElems, newArray, readArray, writeArray)
import Data.IORef
import Data.List (sort)
import Data.Word (Word64)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

foreign import ccall safe "capstan_bench_sleep_ns" sleepNs :: Word64 -> IO Word64

callNs, bucketNs :: Word64
callNs = 200000000
bucketNs = 1000000

-- | About 1 us of arithmetic.
workUnit :: Word64 -> Word64
workUnit = go (0 :: Int)
  where
    go !i !x | i >= 400  = x
             | otherwise = go (i + 1) (x * 6364136223846793005 + 1442695040888963407)

body :: Int -> IO (String, Bool)
body n = do
  t0 <- getMonotonicTimeNSec
  let size = (n + 2) * fromIntegral (callNs `div` bucketNs) * 2
  buckets <- newArray (0, size - 1) 0 :: IO (IOUArray Int Int)
  stop <- newIORef False
  go <- newEmptyMVar
  bDone <- newEmptyMVar
  aDone <- newEmptyMVar
  let bump :: Word64 -> IO ()
      bump t = do
        let i = fromIntegral ((t - t0) `div` bucketNs)
        when (i < size) $ readArray buckets i >>= writeArray buckets i . (+ 1)
      alone !b0 !units !x = do
        let !x' = workUnit x
        t <- getMonotonicTimeNSec
        bump t
        if t - b0 < callNs then alone b0 (units + 1) x' else return (units + 1, t - b0, x')
      loopB !units !x = do
        s <- readIORef stop
        if s then return units else do
          let !x' = workUnit x
          t <- getMonotonicTimeNSec
          bump t
          loopB (units + 1) x'
  _ <- forkIO $ do                                    -- B
    b0 <- getMonotonicTimeNSec
    (baseUnits, baseNs, x) <- alone b0 (0 :: Int) 1
    putMVar go ()
    units <- loopB baseUnits x
    putMVar bDone (units, baseUnits, baseNs)
  _ <- forkIO $ do                                    -- A
    takeMVar go
    calls <- forM [1 .. n] $ \_ -> do
      s <- getMonotonicTimeNSec
      e <- sleepNs callNs
      b <- getMonotonicTimeNSec
      return (s, e, b - e)
    writeIORef stop True
    putMVar aDone calls
  calls <- takeMVar aDone
  (units, baseUnits, baseNs) <- takeMVar bDone
  counts <- getElems buckets
  let windows = [ [first .. last' - 1]
                | (s, e, _) <- calls
                , let first = fromIntegral ((s - t0 + bucketNs - 1) `div` bucketNs)
                      last' = min size (fromIntegral ((e - t0) `div` bucketNs)) ]
  inWindows <- mapM (mapM (readArray buckets)) windows
  let cs = concat inWindows
      total = length cs
      covered = length (filter (/= 0) cs)
      windowUnits = sum cs
      lats = sort [l | (_, _, l) <- calls]
      latencyUs = fromIntegral (lats !! (length lats `div` 2)) / 1e3 :: Double
      overlap = 100 * fromIntegral covered / fromIntegral (max 1 total) :: Double
      baseRate = fromIntegral baseUnits / fromIntegral baseNs :: Double
      winRate = fromIntegral windowUnits / (fromIntegral total * fromIntegral bucketNs) :: Double
      work = 100 * winRate / baseRate
      slept = and [e - s >= callNs | (s, e, _) <- calls]
  return (printf "return_latency_us=%.1f overlap_percent=%.2f work_percent=%.1f" latencyUs overlap work,
          slept && sum counts == units)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 10
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n >>= putMVar r)   -- timed body runs in an unbound thread
  (metrics, ok) <- takeMVar r
  printf "capstan-bench name=overlap impl=ghc caps=%d n=%d %s check=%s\n"
    caps n metrics (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
