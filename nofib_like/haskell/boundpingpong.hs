{-# LANGUAGE BangPatterns #-}
-- boundpingpong: MVar ping-pong between the bound main thread and an
-- unbound thread (forkIO).  Main: put m1 i; take m2 (n times); the other:
-- v <- take m1; put m2 v.  Metric: ns_per_handoff = elapsed / (2n).
-- Bound-thread semantics: after every hand-off main compares its
-- pthread_self() with the one it started on, and gettid() before and after
-- the loop; os_thread_changes counts mismatches and must be 0.
-- Check: that, main is bound, and the sum of the values is n(n-1)/2.
-- Haskell twin of nofib_like/boundpingpong.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad (when)
import Foreign.C.Types (CLong (..), CULong (..))
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

foreign import ccall unsafe "capstan_bench_os_self" osSelf :: IO CULong
foreign import ccall unsafe "capstan_bench_gettid" getTid :: IO CLong

ponger :: Int -> MVar Int -> MVar Int -> IO Int
ponger n m1 m2 = go 0 0
  where
    go !i !acc
      | i >= n    = return acc
      | otherwise = do v <- takeMVar m1
                       putMVar m2 v
                       go (i + 1) (acc + v)

-- | Main's side; returns how often main found itself on another OS thread.
pinger :: Int -> MVar Int -> MVar Int -> CULong -> IO Int
pinger n m1 m2 me = go 0 0
  where
    go !i !changes
      | i >= n    = return changes
      | otherwise = do putMVar m1 i
                       _ <- takeMVar m2
                       s <- osSelf
                       go (i + 1) (if s /= me then changes + 1 else changes)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 1000000
  caps <- getNumCapabilities
  bound <- isCurrentThreadBound
  tid0 <- getTid
  me <- osSelf
  m1 <- newEmptyMVar
  m2 <- newEmptyMVar
  d <- newEmptyMVar
  t0 <- getMonotonicTimeNSec
  _ <- forkIO (ponger n m1 m2 >>= putMVar d)
  changes <- pinger n m1 m2 me
  s <- takeMVar d
  t1 <- getMonotonicTimeNSec
  tid1 <- getTid
  let ns = fromIntegral (t1 - t0) / fromIntegral (2 * n) :: Double
      allChanges = changes + (if tid1 /= tid0 then 1 else 0)
      ok = bound && allChanges == 0 && s == n * (n - 1) `div` 2
  printf "capstan-bench name=boundpingpong impl=ghc caps=%d n=%d ns_per_handoff=%.2f os_thread_changes=%d check=%s\n"
    caps n ns allChanges (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
