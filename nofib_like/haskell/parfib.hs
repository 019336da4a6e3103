{-# OPTIONS_GHC -feager-blackholing #-}
-- Eager blackholing: a spark and its maker never both evaluate the same
-- thunk (GHC user guide, "parallel Haskell"), the fair twin of capstan's
-- exactly-once sparks.
{-# LANGUAGE BangPatterns #-}
-- parfib: naive Fibonacci with one spark per call above a threshold t
-- (nofib/parallel/parfib): below t (and below 2) plain sequential fib, so
-- t=1 sparks every call.  Metrics: ms for pfib; seq_ms = best of 3 runs of
-- sequential fib n; ratio = ms / seq_ms; sparks=na (capstan prints its
-- spark counters there).  Check: pfib n t == sfib n.
-- Haskell twin of nofib_like/parfib.cpp.
module Main (main) where

import Control.Concurrent
import Control.Exception (evaluate)
import Control.Monad (forM, when)
import Control.Parallel (par, pseq)
import Data.IORef
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

sfib :: Int -> Int
sfib n = if n < 2 then n else sfib (n - 1) + sfib (n - 2)

pfib :: Int -> Int -> Int
pfib t n
  | n < t || n < 2 = sfib n
  | otherwise      = a `par` (b `pseq` (a + b))
  where
    a = pfib t (n - 1)
    b = pfib t (n - 2)

-- | Time one evaluation to WHNF; returns (value, milliseconds).
timed :: Int -> IO (Int, Double)
timed x = do
  t0 <- getMonotonicTimeNSec
  !v <- evaluate x
  t1 <- getMonotonicTimeNSec
  return (v, fromIntegral (t1 - t0) / 1e6)

body :: Int -> Int -> IO (Double, Double, Bool)
body n t = do
  -- n is read from an IORef at each use so GHC cannot share one evaluation
  -- of fib n between the timed runs.
  ref <- newIORef n
  (got, ms) <- readIORef ref >>= timed . pfib t
  seqs <- forM [1 :: Int .. 3] $ \_ -> readIORef ref >>= timed . sfib
  return (ms, minimum (map snd seqs), all ((== got) . fst) seqs)

main :: IO ()
main = do
  args <- getArgs
  let (n, t) = case args of
        (a : b : _) -> (read a, read b)
        [a]         -> (read a, 2)
        []          -> (32, 2)
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n t >>= putMVar r)   -- timed body runs in an unbound thread
  (ms, seqMs, ok) <- takeMVar r
  printf "capstan-bench name=parfib impl=ghc caps=%d n=%d ms=%.3f seq_ms=%.3f ratio=%.3f sparks=na check=%s\n"
    caps n ms seqMs (ms / seqMs) (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
