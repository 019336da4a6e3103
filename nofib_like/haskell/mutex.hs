{-# LANGUAGE BangPatterns #-}
-- mutex: an MVar () as the lock.  Uncontended: n takeMVar/putMVar pairs on
-- one thread (ns_per_lock).  Contended: 4 threads each doing n/4 rounds of
-- take lock; bump a shared IORef; put lock, yielding every 16 rounds
-- (ns_per_op, the primary metric).  Check: the counters reach n.
-- Haskell twin of nofib_like/mutex.cpp (which also runs std::mutex and
-- Boost.Fiber baselines; those are "na" here).
module Main (main) where

import Control.Concurrent
import Control.Monad (forM_, when)
import Data.IORef
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

uncontended :: Int -> MVar () -> IORef Int -> IO ()
uncontended n lock ref = go 0
  where
    go !i | i >= n = return ()
          | otherwise = do takeMVar lock
                           modifyIORef' ref (+ 1)
                           putMVar lock ()
                           go (i + 1)

worker :: Int -> MVar () -> IORef Int -> IO ()
worker k lock ref = go 0
  where
    go !i | i >= k = return ()
          | otherwise = do takeMVar lock
                           modifyIORef' ref (+ 1)
                           when (i `mod` 16 == 0) yield
                           putMVar lock ()
                           go (i + 1)

body :: Int -> IO (Double, Double, Bool)
body n = do
  lock <- newMVar ()
  r1 <- newIORef 0
  t0 <- getMonotonicTimeNSec
  uncontended n lock r1
  t1 <- getMonotonicTimeNSec
  r2 <- newIORef 0
  dones <- mapM (const newEmptyMVar) [1 .. 4 :: Int]
  t2 <- getMonotonicTimeNSec
  forM_ dones $ \d -> forkIO (worker (n `div` 4) lock r2 >> putMVar d ())
  mapM_ takeMVar dones
  t3 <- getMonotonicTimeNSec
  c1 <- readIORef r1
  c2 <- readIORef r2
  let unc = fromIntegral (t1 - t0) / fromIntegral n :: Double
      con = fromIntegral (t3 - t2) / fromIntegral n :: Double
  return (con, unc, c1 == n && c2 == n)

main :: IO ()
main = do
  args <- getArgs
  let n0 = case args of (a : _) -> read a; [] -> 4000000
      n = n0 `div` 4 * 4
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n >>= putMVar r)
  (con, unc, ok) <- takeMVar r
  printf "capstan-bench name=mutex impl=ghc caps=%d n=%d ns_per_op=%.2f ns_per_lock=%.2f std_ns_per_lock=na os_ns_per_op=na fiber_ns_per_op=na check=%s\n"
    caps n0 con unc (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
