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
import Control.Exception
import Control.Monad
import Data.IORef
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Conc (ThreadStatus (..), threadStatus)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

name :: String
name = "threads007"

kinds :: Int
kinds = 3

defaultN :: Int
defaultN = 20000

descend :: IORef Int -> Int -> IO () -> IO ()
descend c k bottom
  | k <= 1 = bottom `finally` bump c
  | otherwise = descend c (k - 1) bottom `finally` bump c

bump :: IORef Int -> IO ()
bump c = atomicModifyIORef' c (\x -> (x + 1, ()))

waitFor :: IORef Int -> Int -> IO ()
waitFor r want = do
  v <- readIORef r
  when (v < want) (yield >> waitFor r want)

waitBlocked :: ThreadId -> IO ()
waitBlocked t = do
  s <- threadStatus t
  case s of
    ThreadBlocked _ -> return ()
    _ -> yield >> waitBlocked t

floorNs :: Int -> Int -> IO Double
floorNs frames reps = do
  c <- newIORef 0
  t0 <- getMonotonicTimeNSec
  forM_ [1 .. reps] $ \_ ->
    descend c frames (throwIO ThreadKilled) `catch` \e -> case e of
      ThreadKilled -> return ()
      _ -> throwIO e
  t1 <- getMonotonicTimeNSec
  return (fromIntegral (t1 - t0) / fromIntegral reps)

body :: Int -> Int -> IO (Double, Double, Bool)
body n frames = do
  fl <- floorNs frames 100000
  chans <- replicateM 16 newChan :: IO [Chan ()]
  c <- newIORef 0
  tids <- forM [0 .. n - 1] $ \i -> do
    m <- newEmptyMVar :: IO (MVar ())
    let bottom = case i `mod` kinds of
          0 -> takeMVar m
          1 -> threadDelay 3600000000
          _ -> readChan (chans !! (i `mod` 16))
    forkIO (descend c frames bottom)
  mapM_ waitBlocked tids
  t0 <- getMonotonicTimeNSec
  mapM_ killThread tids
  waitFor c (n * frames)
  t1 <- getMonotonicTimeNSec
  v <- readIORef c
  return (fromIntegral (t1 - t0) / fromIntegral n, fl, v == n * frames)

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
