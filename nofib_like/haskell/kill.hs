{-# LANGUAGE BangPatterns #-}
-- kill: GHC's threads006 shape.  Fork n threads masked, then kill each from
-- another thread: killThread waits until the masked target finishes.
-- Metric: ns_per_thread = (fork + kill) / n; fork_ns = the same masked
-- forks waited for without kills, in the same run.  Check: every body ran.
-- Haskell twin of nofib_like/kill.cpp.
module Main (main) where

import Control.Concurrent
import Control.Exception (mask_)
import Control.Monad
import Data.IORef
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

waitFor :: IORef Int -> Int -> IO ()
waitFor r want = do
  v <- readIORef r
  when (v < want) (yield >> waitFor r want)

body :: Int -> IO (Double, Double, Bool)
body n = do
  ran <- newIORef 0
  let bump = atomicModifyIORef' ran (\x -> (x + 1, ()))
  t0 <- getMonotonicTimeNSec
  _ <- mask_ (replicateM n (forkIO bump))
  waitFor ran n
  t1 <- getMonotonicTimeNSec
  writeIORef ran 0
  done <- newEmptyMVar
  t2 <- getMonotonicTimeNSec
  tids <- mask_ (replicateM n (forkIO bump))
  _ <- forkIO (mapM_ killThread tids >> putMVar done ())
  takeMVar done
  t3 <- getMonotonicTimeNSec
  r <- readIORef ran
  let per a b = fromIntegral (b - a) / fromIntegral n :: Double
  return (per t2 t3, per t0 t1, r == n)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 1000000
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n >>= putMVar r)
  (ns, forkNs, ok) <- takeMVar r
  printf "capstan-bench name=kill impl=ghc caps=%d n=%d ns_per_thread=%.2f fork_ns=%.2f check=%s\n"
    caps n ns forkNs (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
