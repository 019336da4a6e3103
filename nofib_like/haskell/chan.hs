{-# LANGUAGE BangPatterns #-}
-- chan: one writer and one reader pass n items through a Control.Concurrent.Chan
-- (GHC's smp chan).  Baseline: n/10 items through an MVar (per item; at
-- -N2 each costs an OS wake-up).
-- Metric: items_per_s = n / elapsed.  Check: the reader's sum = n(n-1)/2.
-- With two or more capabilities, split_items_per_s: the chan with the writer
-- forkOn 0 and the reader forkOn 1.
-- Haskell twin of nofib_like/chan.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad (when)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

-- | ns per item through send/recv, and whether the sum checks.
pipe :: (Int -> IO () -> IO ThreadId) -> Int -> (Int -> IO ()) -> IO Int -> IO (Double, Bool)
pipe fork n send recv = do
  done <- newEmptyMVar
  t0 <- getMonotonicTimeNSec
  _ <- fork 0 (mapM_ send [0 .. n - 1])
  _ <- fork 1 (reader 0 0 >>= putMVar done)
  s <- takeMVar done
  t1 <- getMonotonicTimeNSec
  return (fromIntegral (t1 - t0) / fromIntegral n, s == n * (n - 1) `div` 2)
  where
    reader !i !acc
      | i >= n = return acc
      | otherwise = do v <- recv
                       reader (i + 1) (acc + v)

body :: Int -> Int -> IO (Double, Double, Maybe Double, Bool)
body caps n = do
  c <- newChan
  (cns, ok1) <- pipe (const forkIO) n (writeChan c) (readChan c)
  m <- newEmptyMVar
  (mns, ok2) <- pipe (const forkIO) (max 1 (n `div` 10)) (putMVar m) (takeMVar m)
  if caps > 1
    then do
      s <- newChan
      (sns, ok3) <- pipe forkOn n (writeChan s) (readChan s)
      return (cns, mns, Just sns, ok1 && ok2 && ok3)
    else return (cns, mns, Nothing, ok1 && ok2)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 10000000
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body caps n >>= putMVar r)
  (cns, mns, sns, ok) <- takeMVar r
  let split = maybe "na" (\ns -> printf "%.0f" (1e9 / ns)) sns :: String
  printf "capstan-bench name=chan impl=ghc caps=%d n=%d items_per_s=%.0f ns_per_item=%.2f mvar_items_per_s=%.0f split_items_per_s=%s check=%s\n"
    caps n (1e9 / cns) cns (1e9 / mns) split (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
