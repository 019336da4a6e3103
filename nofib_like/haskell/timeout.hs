{-# LANGUAGE BangPatterns #-}
-- timeout: System.Timeout.timeout (1 h) around an action that finishes at
-- once (ns_per_timeout; base_ns = the action alone), and how late a 1 ms
-- timeout around a takeMVar that never completes returns
-- (expire_median_us / expire_p90_us over `expiries` runs, default 200).
-- Haskell twin of nofib_like/timeout.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad
import Data.IORef
import Data.List (sort)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import System.Timeout (timeout)
import Text.Printf (printf)

{-# NOINLINE action #-}
action :: IORef Int -> IO Int
action r = atomicModifyIORef' r (\x -> (x + 1, x + 1))

loop :: Int -> IO Int -> IO Int
loop n f = go 0 0
  where go !i !acc | i >= n = return acc
                   | otherwise = f >>= \v -> go (i + 1) (acc + v)

body :: Int -> Int -> IO (Double, Double, Double, Double, Bool)
body n expiries = do
  x <- newIORef 0
  t0 <- getMonotonicTimeNSec
  s <- loop n (action x)
  t1 <- getMonotonicTimeNSec
  got <- loop n (maybe 0 id <$> timeout 3600000000 (action x))
  t2 <- getMonotonicTimeNSec
  never <- newEmptyMVar :: IO (MVar ())
  keep <- newIORef never  -- keeps `never` reachable from a live thread
  us <- forM [1 .. expiries] $ \_ -> do
    a <- getMonotonicTimeNSec
    r <- timeout 1000 (readIORef keep >>= takeMVar)
    b <- getMonotonicTimeNSec
    return (fromIntegral (b - a) / 1000 :: Double, r == Nothing)
  let sorted = sort (map fst us)
      med = sorted !! (length sorted `div` 2)
      p90 = sorted !! (length sorted * 9 `div` 10)
      per a b = fromIntegral (b - a) / fromIntegral n :: Double
      ok = got == s + n * n && all snd us && med >= 1000
  _ <- readIORef keep >>= \m -> tryPutMVar m ()
  return (per t1 t2, per t0 t1, med, p90, ok)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 1000000
      e = case args of (_ : k : _) -> read k; _ -> 200
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n e >>= putMVar r)
  (ns, base, med, p90, ok) <- takeMVar r
  printf "capstan-bench name=timeout impl=ghc caps=%d n=%d ns_per_timeout=%.2f base_ns=%.2f expire_median_us=%.1f expire_p90_us=%.1f check=%s\n"
    caps n ns base med p90 (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
