{-# OPTIONS_GHC -feager-blackholing #-}
-- Eager blackholing: a spark and its maker never both evaluate the same
-- thunk (GHC user guide, "parallel Haskell"), the fair twin of capstan's
-- exactly-once sparks.
{-# LANGUAGE BangPatterns #-}
-- balanced: one origin thread sparks n independent tasks of equal cost (a
-- dependent 64-bit LCG chain, ~100 us each), then forces them in order.
-- Idle capabilities take the sparks.  Metrics: ms; sparks=na.  Check: the
-- sum of the results equals a sequential run outside the timed region.
-- Haskell twin of nofib_like/balanced.cpp.
module Main (main) where

import Control.Concurrent
import Control.Exception (evaluate)
import Control.Monad (when)
import Control.Parallel (par, pseq)
import Data.Bits (shiftR)
import Data.List (foldl')
import Data.Word (Word64)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

kIters :: Int
kIters = 60000   -- ~100 us per task; same constant in the C++ program

itersOf :: Int -> Int
itersOf _ = kIters

task :: Int -> Word64
task i = go (itersOf i) (fromIntegral i)
  where
    go :: Int -> Word64 -> Word64
    go 0 !x = x `shiftR` 33
    go k !x = go (k - 1) (x * 6364136223846793005 + 1442695040888963407)

-- | The sequential reference: an explicit loop, so GHC cannot share any
-- work with the sparked list.
seqSum :: Int -> Word64
seqSum n = go 0 0
  where go !i !acc = if i >= n then acc else go (i + 1) (acc + task i)

body :: Int -> IO (Double, Bool)
body n = do
  t0 <- getMonotonicTimeNSec
  let rs = map task [0 .. n - 1]
  !got <- evaluate (foldr par () rs `pseq` foldl' (+) 0 rs)
  t1 <- getMonotonicTimeNSec
  !want <- evaluate (seqSum n)
  return (fromIntegral (t1 - t0) / 1e6, got == want)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 1024
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n >>= putMVar r)   -- timed body runs in an unbound thread
  (ms, ok) <- takeMVar r
  printf "capstan-bench name=balanced impl=ghc caps=%d n=%d ms=%.3f sparks=na check=%s\n"
    caps n ms (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
