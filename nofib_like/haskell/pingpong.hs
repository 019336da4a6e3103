{-# LANGUAGE BangPatterns #-}
-- pingpong: two threads hand values back and forth through two MVars.
-- A: put m1 i; take m2   (n times)     B: v <- take m1; put m2 v   (n times)
-- Metric: ns_per_handoff = elapsed_ns / (2n).  Check: sum of B's values = n(n-1)/2.
-- Haskell twin of nofib_like/pingpong.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad (when)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

pinger :: Int -> MVar Int -> MVar Int -> IO ()
pinger n m1 m2 = go 0
  where
    go !i | i >= n    = return ()
          | otherwise = putMVar m1 i >> takeMVar m2 >> go (i + 1)

-- | Returns the sum of the values received.
ponger :: Int -> MVar Int -> MVar Int -> IO Int
ponger n m1 m2 = go 0 0
  where
    go !i !acc
      | i >= n    = return acc
      | otherwise = do v <- takeMVar m1
                       putMVar m2 v
                       go (i + 1) (acc + v)

body :: Int -> IO (Double, Bool)
body n = do
  m1 <- newEmptyMVar
  m2 <- newEmptyMVar
  da <- newEmptyMVar
  db <- newEmptyMVar
  t0 <- getMonotonicTimeNSec
  _ <- forkIO (pinger n m1 m2 >> putMVar da ())
  _ <- forkIO (ponger n m1 m2 >>= putMVar db)
  takeMVar da
  s <- takeMVar db
  t1 <- getMonotonicTimeNSec
  let ns = fromIntegral (t1 - t0) / fromIntegral (2 * n) :: Double
  return (ns, s == n * (n - 1) `div` 2)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 2000000
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n >>= putMVar r)   -- timed body runs in an unbound thread
  (ns, ok) <- takeMVar r
  printf "capstan-bench name=pingpong impl=ghc caps=%d n=%d ns_per_handoff=%.2f check=%s\n"
    caps n ns (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
