{-# LANGUAGE BangPatterns #-}
-- hog: one thread computes for <ms> milliseconds in a loop that does not
-- allocate (so it passes no safe point: GHC's heap checks are its safe
-- points), and n short threads forked behind it.  Metrics: last_ms, from
-- the first fork until the last short thread has finished; alone_ms, the
-- same n short threads with no hog; hog_ms, how long the hog computed.
-- Check: every short thread ran exactly once, and the first thousandth of
-- the hog's loop computes what a plain call of it computes.
-- Haskell twin of nofib_like/hog.cpp.
module Main (main) where

import Control.Concurrent
import Control.Exception (evaluate)
import Control.Monad (forM_, when)
import Data.IORef
import Data.Word (Word64)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

-- | The C++ program's churn: an LCG, iters steps.  Strict and unboxed: no
-- allocation, so no safe point inside.
churn :: Word64 -> Int -> Word64
churn !x 0 = x
churn !x !k = churn (x * 6364136223846793005 + 1442695040888963407) (k - 1)
{-# NOINLINE churn #-}

-- | Iterations of churn that take about ms milliseconds here.
calibrate :: Int -> IO Int
calibrate ms = go 1000000
  where
    go iters = do
      t0 <- getMonotonicTimeNSec
      _ <- evaluate (churn 1 iters)
      t1 <- getMonotonicTimeNSec
      let dt = fromIntegral (t1 - t0) :: Double
      if dt >= 20e6
        then return (round (fromIntegral iters * fromIntegral ms * 1e6 / dt))
        else go (iters * 4)

-- | Forks n short threads and waits for all; ms from the first fork until
-- the last finished, or -1 on a failed check.
forkShorts :: Int -> IO Double
forkShorts n = do
  ran <- newIORef (0 :: Int)
  total <- newIORef (0 :: Int)
  lastDone <- newEmptyMVar
  t0 <- getMonotonicTimeNSec
  forM_ [1 .. n] $ \i -> forkIO $ do
    atomicModifyIORef' total (\s -> (s + i, ()))
    k <- atomicModifyIORef' ran (\x -> (x + 1, x + 1))
    when (k == n) $ getMonotonicTimeNSec >>= putMVar lastDone
  t1 <- takeMVar lastDone
  s <- readIORef total
  return (if s == n * (n + 1) `div` 2 then fromIntegral (t1 - t0) / 1e6 else -1)

body :: Int -> Int -> IO (Double, Double, Double, Bool)
body n iters = do
  let expect = churn 7 (iters `div` 1000)
  hogResult <- newEmptyMVar
  h0 <- getMonotonicTimeNSec
  _ <- forkIO $ do
    x <- evaluate (churn 7 (iters `div` 1000))
    _ <- evaluate (churn x (iters - iters `div` 1000))
    h1 <- getMonotonicTimeNSec
    putMVar hogResult (x, fromIntegral (h1 - h0) / 1e6)
  lastMs <- forkShorts n
  (x, hogMs) <- takeMVar hogResult
  alone <- forkShorts n  -- after the hog, as in the C++ program
  return (lastMs, alone, hogMs, x == expect && alone >= 0 && lastMs >= 0)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 200
      ms = case args of (_ : b : _) -> read b; _ -> 1000
  caps <- getNumCapabilities
  iters <- calibrate ms
  r <- newEmptyMVar
  _ <- forkIO (body n iters >>= putMVar r)
  (lastMs, alone, hogMs, ok) <- takeMVar r
  printf "capstan-bench name=hog impl=ghc caps=%d n=%d last_ms=%.3f alone_ms=%.3f hog_ms=%.1f check=%s\n"
    caps n lastMs alone hogMs (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
