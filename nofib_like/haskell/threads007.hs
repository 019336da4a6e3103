{-# LANGUAGE BangPatterns #-}
-- threads007: n threads blocked at exit, a third each on MVars, Chan reads
-- and threadDelay (1 h) (GHC's threads007 shape), each `frames` frames
-- deep with a `finally` handler in every frame.  GHC's exit does not run
-- the handlers of blocked threads, so the twin does what capstan's run()
-- does at exit: it kills every blocked thread and waits until every
-- handler has run.  exit_ns = that time / n; floor_ns = throwIO
-- ThreadKilled caught through the same frames; ratio = the quotient.
-- Haskell twin of nofib_like/shutdown.cpp built as threads007 (shutdown.hs:
-- the same with fd waits instead of Chans).
module Main (main) where

import Control.Concurrent
import Control.Monad (replicateM, when)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

import Unwind (floorNs, killBlocked)

name :: String
name = "threads007"

kinds :: Int
kinds = 3

defaultN :: Int
defaultN = 20000

body :: Int -> Int -> IO (Double, Double, Bool)
body n frames = do
  fl <- floorNs frames 100000
  chans <- replicateM 16 newChan :: IO [Chan ()]
  let bottom i = case i `mod` kinds of
          0 -> newEmptyMVar >>= takeMVar :: IO ()
          1 -> threadDelay 3600000000
          _ -> readChan (chans !! (i `mod` 16))
  (ns, ok) <- killBlocked n frames bottom
  return (ns, fl, ok)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> defaultN
      frames = case args of (_ : f : _) -> read f; _ -> 1
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n frames >>= putMVar r)
  (ns, fl, ok) <- takeMVar r
  printf "capstan-bench name=%s impl=ghc caps=%d n=%d exit_ns=%.2f floor_ns=%.2f ratio=%.2f frames=%d check=%s\n"
    name caps n ns fl (ns / fl) frames (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
