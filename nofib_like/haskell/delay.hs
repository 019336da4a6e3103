{-# LANGUAGE BangPatterns #-}
-- delay: n threads each threadDelay 1 ms at once.
-- Metric: ms from the first fork until every thread has woken; rss_kb = peak
-- RSS.  Check: every thread woke, none slept less than 1 ms.
-- Haskell twin of nofib_like/delay.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad (forM_, when)
import Data.IORef
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

peakRssKb :: IO Int
peakRssKb = do
  s <- readFile "/proc/self/status"
  let hits = [read v | l <- lines s, ("VmHWM:" : v : _) <- [words l]]
  return (case hits of (v : _) -> v; [] -> -1)

body :: Int -> IO (Double, Bool)
body n = do
  woke <- newIORef (0 :: Int)
  early <- newIORef (0 :: Int)
  done <- newEmptyMVar
  t0 <- getMonotonicTimeNSec
  forM_ [1 .. n] $ \_ -> forkIO $ do
    s <- getMonotonicTimeNSec
    threadDelay 1000
    e <- getMonotonicTimeNSec
    when (e - s < 1000000) $ atomicModifyIORef' early (\x -> (x + 1, ()))
    k <- atomicModifyIORef' woke (\x -> (x + 1, x + 1))
    when (k == n) $ putMVar done ()
  takeMVar done
  t1 <- getMonotonicTimeNSec
  w <- readIORef woke
  e <- readIORef early
  return (fromIntegral (t1 - t0) / 1e6, w == n && e == 0)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 100000
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n >>= putMVar r)
  (ms, ok) <- takeMVar r
  rss <- peakRssKb
  printf "capstan-bench name=delay impl=ghc caps=%d n=%d ms=%.1f rss_kb=%d check=%s\n"
    caps n ms rss (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
