{-# LANGUAGE BangPatterns #-}
-- condvar: Haskell has no condition variable; its idiom for "wait for the
-- other side's turn" is an MVar hand-off, so the twin is two threads
-- passing the turn through two MVars (ns_per_handoff = elapsed / 2n).
-- Haskell twin of nofib_like/condvar.cpp (whose baselines are "na" here).
module Main (main) where

import Control.Concurrent
import Control.Monad (when)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

side :: Int -> MVar Int -> MVar Int -> IO Int
side n mine theirs = go 0 0
  where
    go !i !acc | i >= n = return acc
               | otherwise = do v <- takeMVar mine
                                putMVar theirs (v + 1)
                                go (i + 1) (acc + 1)

-- Both sides run in forkIO threads: main is a bound thread, and hand-offs
-- with it would cost OS-thread switches that the C++ program does not pay.
body :: Int -> IO (Double, Bool)
body n = do
  a <- newMVar 0
  b <- newEmptyMVar
  done <- newEmptyMVar
  t0 <- getMonotonicTimeNSec
  _ <- forkIO (side n b a >>= putMVar done)
  sa <- side n a b
  sb <- takeMVar done
  t1 <- getMonotonicTimeNSec
  return (fromIntegral (t1 - t0) / fromIntegral (2 * n), sa + sb == 2 * n)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 1000000
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n >>= putMVar r)
  (ns, ok) <- takeMVar r
  printf "capstan-bench name=condvar impl=ghc caps=%d n=%d ns_per_handoff=%.2f mvar_ns_per_handoff=na std_ns_per_handoff=na check=%s\n"
    caps n ns (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
